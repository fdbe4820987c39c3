// policyrouter dashboard charts: the trends of the last 10 minutes, drawn
// as plain SVG from the GET /stats the page already reads each second. The
// history lives in this page only. Charts depend on the number of nodes,
// not of policies: with more than MAX_NODE_LINES nodes the utilisation chart
// draws the mean and the hottest node instead of one line per node.
"use strict";

window.policyrouterCharts = (() => {
  const WINDOW_MS = 10 * 60 * 1000;
  const MAX_NODE_LINES = 12;
  const W = 360, H = 120, L = 40, R = 6, T = 8, B = 14;
  const NS = "http://www.w3.org/2000/svg";

  const svg = (tag, cls) => {
    const e = document.createElementNS(NS, tag);
    if (cls) e.setAttribute("class", cls);
    return e;
  };
  const html = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const fmtAxis = (v, unit) => {
    if (unit === "%") return Math.round(v * 100) + "%";
    if (v >= 10000) return Math.round(v / 1000) + "k";
    if (v >= 100) return String(Math.round(v));
    if (v >= 10) return v.toFixed(0);
    if (v >= 1) return v.toFixed(1);
    return v === 0 ? "0" : v.toPrecision(1);
  };

  // Chart is one figure: a title, a legend and one polyline per series.
  class Chart {
    constructor(parent, id, title, unit, fixedMax) {
      this.unit = unit;
      this.fixedMax = fixedMax;
      this.points = []; // {t, v: {series: number|null}}
      this.lines = new Map(); // series -> {poly, key}
      this.root = html("figure", "chart");
      this.root.id = "chart-" + id;
      this.root.dataset.points = "0";
      const cap = html("figcaption");
      cap.append(html("span", "chart-title", title), (this.legend = html("span", "chart-legend")));
      this.svg = svg("svg");
      this.svg.setAttribute("viewBox", "0 0 " + W + " " + H);
      this.svg.setAttribute("role", "img");
      this.svg.setAttribute("aria-label", title);
      this.labels = [];
      for (let i = 0; i <= 2; i++) {
        const y = T + ((H - T - B) * i) / 2;
        const grid = svg("line", "grid");
        grid.setAttribute("x1", L);
        grid.setAttribute("x2", W - R);
        grid.setAttribute("y1", y);
        grid.setAttribute("y2", y);
        const label = svg("text", "axis");
        label.setAttribute("x", L - 4);
        label.setAttribute("y", y + 3);
        this.svg.append(grid, label);
        this.labels.push(label);
      }
      const span = svg("text", "axis span");
      span.setAttribute("x", W - R);
      span.setAttribute("y", H - 2);
      this.span = span;
      this.svg.append(span);
      this.root.append(cap, this.svg);
      parent.append(this.root);
    }

    push(t, values) {
      this.points.push({ t, v: values });
      while (this.points.length > 0 && this.points[0].t < t - WINDOW_MS) this.points.shift();
    }

    line(name) {
      let l = this.lines.get(name);
      if (!l) {
        const cls = "s" + (this.lines.size % 6);
        const poly = svg("polyline", "series " + cls);
        this.svg.append(poly);
        const key = html("span", "key " + cls, name);
        this.legend.append(key);
        l = { poly, key };
        this.lines.set(name, l);
      }
      return l;
    }

    draw(now) {
      let max = 0;
      const names = new Set();
      for (const p of this.points) {
        for (const [name, v] of Object.entries(p.v)) {
          names.add(name);
          if (v !== null && Number.isFinite(v)) max = Math.max(max, v);
        }
      }
      if (this.fixedMax) max = Math.max(max, this.fixedMax);
      if (max === 0) max = 1;
      // The time axis grows with the history, up to WINDOW_MS.
      const first = this.points.length ? this.points[0].t : now;
      const spanMS = Math.max(10000, Math.min(WINDOW_MS, now - first));
      const x0 = now - spanMS;
      const x = (t) => L + ((W - L - R) * (t - x0)) / spanMS;
      const y = (v) => T + (H - T - B) * (1 - v / max);
      let drawn = 0;
      for (const name of names) {
        const pts = [];
        for (const p of this.points) {
          const v = p.v[name];
          if (v === null || v === undefined || !Number.isFinite(v)) continue;
          pts.push(x(p.t).toFixed(1) + "," + y(v).toFixed(1));
        }
        drawn = Math.max(drawn, pts.length);
        this.line(name).poly.setAttribute("points", pts.join(" "));
      }
      for (const [name, l] of this.lines) {
        const gone = !names.has(name);
        if (gone) l.poly.setAttribute("points", "");
        l.key.hidden = gone;
      }
      for (let i = 0; i <= 2; i++) {
        const text = fmtAxis((max * (2 - i)) / 2, this.unit);
        if (this.labels[i].textContent !== text) this.labels[i].textContent = text;
      }
      this.span.textContent = "last " + (spanMS >= 60000 ? Math.round(spanMS / 60000) + " min" : Math.round(spanMS / 1000) + " s");
      this.root.dataset.points = String(drawn);
    }
  }

  // PREFIX_OUTCOMES are the outcomes of a decision's prefix stage
  // (/stats prefix.decisions), in the order the charts list them.
  const PREFIX_OUTCOMES = ["hit", "miss", "balanced", "none"];

  // prefixShown says whether /stats has a prefix index with something to
  // show: an older router has no prefix object, and a router whose
  // requests carry no prompts (or with affinity off) has only zeros and
  // decisions without hashes (none).
  const prefixShown = (pf) => {
    if (!pf || typeof pf !== "object") return false;
    if (pf.prompt_tokens > 0 || pf.matched_tokens > 0 || pf.index_bytes > 0) return true;
    if (Object.entries(pf.decisions || {}).some(([o, n]) => o !== "none" && n > 0)) return true;
    return (pf.policies || []).some((p) => p.indexed_tokens > 0 || p.evictions > 0);
  };

  // quantile estimates the q-quantile of a histogram's counts by linear
  // interpolation within the bucket that holds it; null without counts.
  const quantile = (bounds, counts, q) => {
    let total = 0;
    for (const c of counts) total += c;
    if (total === 0) return null;
    const target = q * total;
    let cum = 0;
    for (let i = 0; i < counts.length; i++) {
      if (counts[i] > 0 && cum + counts[i] >= target) {
        const lo = i === 0 ? 0 : bounds[i - 1];
        const hi = i < bounds.length ? bounds[i] : bounds[bounds.length - 1];
        return lo + ((hi - lo) * (target - cum)) / counts[i];
      }
      cum += counts[i];
    }
    return bounds[bounds.length - 1];
  };

  // create builds the charts in parent and returns a function that takes
  // each /stats document, with the page's clock, and redraws (unless
  // noDraw: a test filling the history draws once, at the end).
  const create = (parent) => {
    const charts = {
      decisions: new Chart(parent, "decisions", "decisions per second", ""),
      waiters: new Chart(parent, "waiters", "/select waiters", ""),
      wait: new Chart(parent, "wait", "/select wait, ms", ""),
      util: new Chart(parent, "utilisation", "utilisation per node (in flight / capacity)", "%", 1),
      health: new Chart(parent, "health", "unhealthy and draining policies", ""),
      versions: new Chart(parent, "versions", "policies per weight version", ""),
      // The prefix index's charts show only while it has something in it
      // (shown): an older router, or one whose requests carry no prompts,
      // has none.
      prefixHit: new Chart(parent, "prefix-hit", "prefix hit rate (matched / prompt tokens)", "%", 1),
      prefixDecisions: new Chart(parent, "prefix-decisions", "prefix decisions per second, by outcome", ""),
    };
    charts.prefixHit.root.hidden = true;
    charts.prefixDecisions.root.hidden = true;
    let prev = null; // the previous /stats, for rates and histogram deltas

    return (s, now, noDraw) => {
      const d = s.decisions || {};
      // A router without /select calls may send its histogram's lists as
      // null.
      const sw = d.select_wait || {};
      const wait = { bounds_ms: sw.bounds_ms || [], counts: sw.counts || [] };
      if (prev && prev.time !== s.time) {
        const dt = (Date.parse(s.time) - Date.parse(prev.time)) / 1000;
        const pd = prev.decisions || {};
        const restarted = (d.select_total || 0) < (pd.select_total || 0) || (d.assign_total || 0) < (pd.assign_total || 0);
        if (dt > 0 && !restarted) {
          charts.decisions.push(now, {
            select: ((d.select_total || 0) - (pd.select_total || 0)) / dt,
            assign: ((d.assign_total || 0) - (pd.assign_total || 0)) / dt,
          });
          const pc = (pd.select_wait && pd.select_wait.counts) || [];
          const delta = wait.counts.map((c, i) => Math.max(0, c - (pc[i] || 0)));
          charts.wait.push(now, {
            p50: quantile(wait.bounds_ms, delta, 0.5),
            p99: quantile(wait.bounds_ms, delta, 0.99),
          });
        }
        const pf = s.prefix, ppf = prev.prefix;
        if (dt > 0 && pf && ppf && (pf.prompt_tokens || 0) >= (ppf.prompt_tokens || 0)) {
          const prompt = (pf.prompt_tokens || 0) - (ppf.prompt_tokens || 0);
          const matched = (pf.matched_tokens || 0) - (ppf.matched_tokens || 0);
          charts.prefixHit.push(now, { "hit rate": prompt > 0 ? Math.max(0, matched) / prompt : null });
          const dd = pf.decisions || {}, pdd = ppf.decisions || {};
          const byOutcome = {};
          for (const o of PREFIX_OUTCOMES.concat(Object.keys(dd).filter((o) => !PREFIX_OUTCOMES.includes(o)))) {
            byOutcome[o] = Math.max(0, (dd[o] || 0) - (pdd[o] || 0)) / dt;
          }
          charts.prefixDecisions.push(now, byOutcome);
        }
      }
      prev = s;
      charts.waiters.push(now, { waiters: s.waiters || 0 });
      const tot = s.totals || {};
      charts.health.push(now, { unhealthy: tot.unhealthy || 0, draining: tot.draining || 0 });

      const nodes = Object.entries(s.nodes || {}).filter(([, c]) => c.capacity > 0);
      const util = {};
      if (nodes.length <= MAX_NODE_LINES) {
        for (const [id, c] of nodes) util[id === "" ? "(no node)" : id] = c.inflight / c.capacity;
      } else if (nodes.length > 0) {
        let sum = 0, hot = 0;
        for (const [, c] of nodes) {
          const u = c.inflight / c.capacity;
          sum += u;
          hot = Math.max(hot, u);
        }
        util["mean of " + nodes.length + " nodes"] = sum / nodes.length;
        util["hottest node"] = hot;
      }
      charts.util.push(now, util);

      const versions = {};
      for (const p of s.policies || []) {
        const v = "v" + (p.version || 0);
        versions[v] = (versions[v] || 0) + 1;
      }
      charts.versions.push(now, versions);

      const shown = prefixShown(s.prefix);
      charts.prefixHit.root.hidden = !shown;
      charts.prefixDecisions.root.hidden = !shown;

      if (!noDraw) for (const c of Object.values(charts)) c.draw(now);
    };
  };

  return { create, quantile, prefixShown, PREFIX_OUTCOMES };
})();
