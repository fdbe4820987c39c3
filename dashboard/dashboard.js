// policyrouter dashboard: reads GET /stats once a second and renders every
// policy as a tile, grouped by node, and during a rolling update each
// policy's phase in it, by wave (GET /updates/{id}). Data is only ever
// written with textContent (never as HTML): policy and node ids come from
// clients.
"use strict";

(() => {
  const STATS_URL = "/stats";
  const UPDATES_URL = "/updates/"; // + the id of the update /stats names
  const TOKEN_KEY = "policyrouter.token";
  const DENSITY_KEY = "policyrouter.density";
  const REFRESH_MS = 1000;
  const AUTH_RETRY_MS = 5000;
  const FETCH_TIMEOUT_MS = 4000;
  const RATE_WINDOW_MS = 5000; // throughput is averaged over this window
  const COMPACT_OVER = 128; // "auto" density switches to compact tiles above this many policies
  // paused and asleep are the engine's own word (not failures): each has
  // its colour, and counts apart from unhealthy.
  const STATES = ["idle", "busy", "unhealthy", "draining", "unknown", "paused", "asleep"];
  const ABBR = { idle: "IDLE", busy: "BUSY", unhealthy: "DOWN", draining: "DRAIN", unknown: "NEW", paused: "PAUSE", asleep: "SLEEP" };
  const NO_NODE = "";
  // shownState is the state a policy's tile, its node's counts and the
  // totals show: update_failed (a failed update keeps the policy drained)
  // and any state this page does not know count as unhealthy.
  const shownState = (state) => (STATES.includes(state) ? state : "unhealthy");

  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const setText = (e, text) => {
    if (e.textContent !== text) e.textContent = text;
  };

  // ---- formatting -------------------------------------------------------

  const fmtCount = (n) => {
    if (!Number.isFinite(n)) return "—";
    const a = Math.abs(n);
    if (a < 10000) return String(Math.round(n));
    if (a < 1e6) return (n / 1e3).toFixed(a < 1e5 ? 1 : 0) + "k";
    if (a < 1e9) return (n / 1e6).toFixed(a < 1e8 ? 1 : 0) + "M";
    return (n / 1e9).toFixed(1) + "G";
  };
  const fmtRate = (r) => {
    if (r === null || !Number.isFinite(r)) return "—";
    if (r === 0) return "0";
    if (r < 10) return r.toFixed(1);
    return fmtCount(r);
  };
  const fmtMS = (ms) => {
    if (!Number.isFinite(ms)) return "—";
    if (ms < 1) return ms.toFixed(2) + " ms";
    if (ms < 10) return ms.toFixed(1) + " ms";
    if (ms < 1000) return Math.round(ms) + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 1 : 0) + " s";
    return fmtDuration(ms / 1000);
  };
  // fmtUpdate says where a rolling update stands: "v8 running · wave 3 ·
  // 5 done, 2 updating, 9 pending".
  const fmtUpdate = (u) => {
    if (!u) return "none";
    const order = ["done", "updating", "draining", "failed", "pending"];
    const phases = order.filter((p) => (u.phases || {})[p]).map((p) => u.phases[p] + " " + p);
    return "v" + u.version + " " + u.state + " · wave " + u.waves + (phases.length ? " · " + phases.join(", ") : "");
  };
  // fmtFloor says where the weight-version floor stands: "none", or
  // "45 · met by 3 of 4" (of the policies that can route).
  const fmtFloor = (s) => {
    const f = s.floor;
    if (!s.min_version) return "none";
    if (!f) return String(s.min_version);
    return s.min_version + " · met by " + f.meeting + " of " + f.routable;
  };
  // floorAlarm is the banner's text while the floor stops all routing:
  // policies can route but none has reached it. "" otherwise, and for a
  // router whose /stats has no floor object.
  const floorAlarm = (s) => {
    const f = s.floor;
    if (!f || f.met !== false) return "";
    const who = f.routable === 1 ? "the one policy that can route has not" : "none of the " + f.routable + " policies that can route has";
    return "Weight floor " + s.min_version + " is unmet: " + who + " reached it (the highest version is " + f.highest_version +
      "), so all routing waits. Update the policies, or lower the floor with PUT /weights.";
  };
  // prefixShown and PREFIX_OUTCOMES are charts.js's: the charts and the
  // figures show the prefix index on the same condition.
  const charts = window.policyrouterCharts || {};
  const prefixShown = charts.prefixShown || (() => false);
  const PREFIX_OUTCOMES = charts.PREFIX_OUTCOMES || ["hit", "miss", "balanced", "none"];
  // prefixFigure is the summary's prefix figure: the share of prompt
  // tokens expected cached since the start, and its tooltip.
  const prefixFigure = (pf) => {
    const prompt = pf.prompt_tokens || 0, matched = pf.matched_tokens || 0;
    const d = pf.decisions || {};
    const outcomes = PREFIX_OUTCOMES.concat(Object.keys(d).filter((o) => !PREFIX_OUTCOMES.includes(o)));
    return {
      rate: prompt > 0 ? (100 * matched / prompt).toFixed(1) + "%" : "—",
      of: fmtCount(prompt) + " tok",
      title: "prefix hit rate since start: prompt tokens expected cached on the chosen policy (" + matched +
        ") of the prompt tokens of decisions with prefix hashes (" + prompt + ")\n" +
        "decisions: " + outcomes.map((o) => o + " " + (d[o] || 0)).join(", ") + "\n" +
        "index " + fmtBytes(pf.index_bytes || 0) + (pf.max_bytes ? " of " + fmtBytes(pf.max_bytes) : "") +
        ", " + (pf.policies || []).length + " policies indexed",
    };
  };
  const fmtBytes = (n) => {
    if (!Number.isFinite(n)) return "—";
    if (n < 1024) return n + " B";
    if (n < 1 << 20) return (n / 1024).toFixed(1) + " KiB";
    if (n < 1 << 30) return (n / (1 << 20)).toFixed(1) + " MiB";
    return (n / (1 << 30)).toFixed(1) + " GiB";
  };
  const PROBES_TITLE = "probes of the policies' load and health over the span shown (the counts since start are in GET /stats and /metrics); red while new ones fail";
  // probeCounts is the poller figure: its probes and failures over its
  // recent window (window_seconds) rather than since start, where a router
  // up for weeks would hide a new run of failures behind its old
  // successes; and the span's words. An older router without a window:
  // the counts since start.
  const probeCounts = (poller) => {
    if (poller.window_seconds == null) {
      return { probes: poller.probes_total, failures: poller.failures_total, span: "since start" };
    }
    const w = poller.window_seconds;
    return { probes: poller.probes_recent, failures: poller.failures_recent,
      span: "last " + (w >= 60 ? Math.round(w / 60) + " min" : w + " s") };
  };
  // fmtPolicyProbes is a policy's probe line: over the span of probeCounts
  // when the router counts one, and since start.
  const fmtPolicyProbes = (p, span) => {
    const inRow = p.consecutive_failures + " failing in a row";
    if (p.probes_recent == null) return "probes " + p.probes_total + " (" + p.probe_failures_total + " failed), " + inRow;
    return "probes in the " + span + ": " + p.probes_recent + " (" + p.probe_failures_recent + " failed), " + inRow +
      "; since start " + p.probes_total + " (" + p.probe_failures_total + " failed)";
  };
  const fmtDuration = (sec) => {
    if (!Number.isFinite(sec) || sec < 0) return "—";
    sec = Math.floor(sec);
    const d = Math.floor(sec / 86400), h = Math.floor(sec / 3600) % 24;
    const m = Math.floor(sec / 60) % 60, s = sec % 60;
    const two = (x) => String(x).padStart(2, "0");
    if (d > 0) return d + "d " + two(h) + "h";
    if (h > 0) return h + "h " + two(m) + "m";
    if (m > 0) return m + "m " + two(s) + "s";
    return s + "s";
  };
  const fmtClock = (t) => {
    const d = new Date(t);
    return [d.getHours(), d.getMinutes(), d.getSeconds()].map((x) => String(x).padStart(2, "0")).join(":");
  };
  const shortID = (id) => {
    if (/^[0-9a-f]{8}-[0-9a-f]{4}-/i.test(id)) return id.slice(0, 8);
    return id.length > 18 ? id.slice(0, 17) + "…" : id;
  };

  // ---- throughput -------------------------------------------------------

  // Rate keeps (time, counter) samples over RATE_WINDOW_MS and answers the
  // counter's increase per second over them.
  class Rate {
    constructor() { this.samples = []; this.rate = null; }
    add(t, v) {
      const s = this.samples;
      const last = s[s.length - 1];
      if (last && t === last[0] && v === last[1]) return this.rate; // the same stats again
      if (last && (v < last[1] || t < last[0])) s.length = 0; // reset or restart
      s.push([t, v]);
      while (s.length > 2 && t - s[1][0] >= RATE_WINDOW_MS) s.shift();
      const dt = s.length < 2 ? 0 : (t - s[0][0]) / 1000;
      this.rate = dt > 0 ? (v - s[0][1]) / dt : null;
      return this.rate;
    }
  }

  // ---- state ------------------------------------------------------------

  const tiles = new Map(); // policy key -> tile
  const nodes = new Map(); // node id -> node section
  const totalRate = new Rate();
  let order = ""; // the rendered order of nodes and tiles
  let filter = null; // a state, or null for all
  let density = sessionStorage.getItem(DENSITY_KEY) || "auto";
  let lastStats = null;
  let lastFailures = null;
  let lastUptime = -1;
  let timer = 0;
  let inflight = false;
  let editingToken = false; // the token form stays open while the user changes the token

  // ---- tiles ------------------------------------------------------------

  const newTile = () => {
    const t = {};
    t.root = el("article", "tile");
    const head = el("div", "t-head");
    t.idx = el("span", "t-idx");
    t.state = el("span", "t-state");
    t.state.append(el("i", "glyph"));
    t.word = el("span", "word");
    t.abbr = el("span", "abbr");
    t.state.append(t.word, t.abbr);
    t.glyph = t.state.firstChild;
    t.glyph.setAttribute("aria-hidden", "true");
    t.ver = el("span", "t-ver");
    t.ver.title = "weight version";
    head.append(t.idx, t.ver, t.state);
    t.id = el("div", "t-id");
    t.eng = el("span", "t-eng");
    t.eng.title = "engine";
    t.id.append(t.eng, el("span", "t-idtext"));
    t.idText = t.id.lastChild;
    const bar = el("div", "t-bar");
    t.fill = el("i");
    bar.append(t.fill);
    const nums = el("div", "t-nums");
    const num = (label) => {
      const s = el("span");
      const b = el("b");
      s.append(b, el("span", "lbl", label));
      nums.append(s);
      return b;
    };
    t.load = num("load");
    t.flight = num("in flight");
    t.rate = num("/s");
    t.poll = el("div", "t-poll");
    t.prefix = el("div", "t-prefix");
    t.prefix.hidden = true;
    t.err = el("div", "t-err");
    t.root.append(head, t.id, bar, nums, t.poll, t.prefix, t.err);
    t.meter = new Rate();
    t.cls = "";
    t.width = "";
    return t;
  };

  const updateTile = (t, p, now, lateMS, span, pfx) => {
    const state = shownState(p.state);
    const cls = "tile s-" + state;
    if (t.cls !== cls) {
      t.root.className = cls;
      t.root.dataset.state = state;
      t.cls = cls;
    }
    t.root.dataset.index = String(p.index);
    t.root.hidden = filter !== null && filter !== state;
    setText(t.idx, String(p.index));
    setText(t.ver, "v" + (p.version || 0));
    // update_failed is shown as unhealthy, in two words that fit a tile.
    setText(t.word, (p.state || "unknown").replace("_", " "));
    setText(t.abbr, ABBR[state]);
    setText(t.eng, p.engine || "policyrouter");
    t.eng.dataset.engine = p.engine || "policyrouter";
    setText(t.idText, shortID(p.id || ""));
    setText(t.load, fmtCount(p.load));
    setText(t.flight, p.inflight + "/" + p.capacity);
    const done = (p.selected_total || 0) + (p.assigned_total || 0);
    t.r = t.meter.add(now, done);
    setText(t.rate, fmtRate(t.r));
    // The bar is the capacity taken: occupancy, max(engine load, outside
    // load + leases); an older router reports leases only.
    const taken = p.occupancy != null ? p.occupancy : p.inflight;
    const w = p.capacity > 0 ? Math.min(100, (100 * taken) / p.capacity).toFixed(1) + "%" : "0%";
    if (t.width !== w) {
      t.fill.style.width = w; // CSSOM, allowed by the CSP
      t.width = w;
    }

    let poll, pollCls = "t-poll";
    const age = p.last_poll ? Math.max(0, now - Date.parse(p.last_poll)) : NaN;
    if (p.consecutive_failures > 0) {
      // A failed probe's latency means little: say how many failed, and when.
      poll = p.consecutive_failures + " failed probe" + (p.consecutive_failures === 1 ? "" : "s") +
        (p.last_poll ? " · " + fmtMS(age) + " ago" : "");
      pollCls += " failing";
    } else if (!p.last_poll) {
      poll = "not polled yet";
    } else {
      poll = "polled " + fmtMS(age) + " ago · " + fmtMS(p.latency_ms);
      if (age > lateMS) pollCls += " late";
    }
    setText(t.poll, poll);
    if (t.poll.className !== pollCls) t.poll.className = pollCls;
    // Why it fails, and since when: what an operator acts on.
    let err = p.last_error || "";
    if (err && p.unhealthy_since) err = "down " + fmtMS(Math.max(0, now - Date.parse(p.unhealthy_since))) + ": " + err;
    setText(t.err, err);
    t.err.hidden = err === "";
    // What the router's prefix index expects the engine to cache: only
    // while the router keeps an index with something in it (pfx).
    const ix = pfx ? pfx.get(p.id) : undefined;
    const prefixLine = ix ? "prefix " + fmtCount(ix.indexed_tokens || 0) +
      (ix.capacity_tokens ? " of " + fmtCount(ix.capacity_tokens) : "") + " tok" : "";
    setText(t.prefix, prefixLine);
    t.prefix.hidden = prefixLine === "";

    const title = [
      "policy " + p.index + " — " + (p.state || "unknown"),
      "id: " + p.id,
      "node: " + (p.node_id || "(none)"),
      "url: " + p.url,
      "engine: " + (p.engine || "policyrouter"),
      "weight version: " + (p.version || 0) + (p.weight_version && p.weight_version !== String(p.version || 0) ? " (" + p.weight_version + ")" : ""),
      "load " + p.load + ", in flight " + p.inflight + " of " + p.capacity,
      p.occupancy != null ? "occupancy " + p.occupancy + " of " + p.capacity + " (engine load " +
        (p.engine_load == null ? "not reported" : p.engine_load) + ", outside " + p.outside_load + ")" : "",
      "selected " + p.selected_total + ", assigned " + p.assigned_total + ", completed " + p.completed_total,
      "throughput " + fmtRate(t.r) + "/s over the last " + RATE_WINDOW_MS / 1000 + " s",
      p.last_poll ? "last poll " + fmtMS(age) + " ago, latency " + fmtMS(p.latency_ms) : "not polled yet",
      fmtPolicyProbes(p, span),
      p.last_error ? "last error: " + p.last_error : "",
      p.last_ok ? "last good probe " + fmtMS(Math.max(0, now - Date.parse(p.last_ok))) + " ago" : "",
      ix ? "prefix index: " + (ix.indexed_tokens || 0) + " tokens (" + (ix.pending_tokens || 0) + " pending, not yet confirmed by an answer)" +
        (ix.capacity_tokens ? " of " + ix.capacity_tokens : "") + ", " + (ix.evictions || 0) + " blocks evicted, cleared " + (ix.clears || 0) + " times" : "",
    ].filter(Boolean).join("\n");
    if (t.root.title !== title) t.root.title = title;
  };

  // ---- nodes ------------------------------------------------------------

  const newNode = (id) => {
    const n = {};
    n.root = el("section", "node");
    n.root.dataset.node = id;
    const head = el("div", "node-head");
    head.append(el("h2", "", id === NO_NODE ? "(no node)" : id));
    n.meta = el("div", "node-meta");
    n.count = el("span");
    n.states = {};
    n.meta.append(n.count);
    for (const s of STATES) {
      const m = el("span", "m-state s-" + s);
      const g = el("i", "glyph");
      g.setAttribute("aria-hidden", "true");
      m.append(g, el("span"));
      n.states[s] = m;
      n.meta.append(m);
    }
    n.flight = el("span");
    n.rate = el("span");
    n.meta.append(n.flight, n.rate);
    head.append(n.meta);
    n.grid = el("div", "tiles");
    n.root.append(head, n.grid);
    return n;
  };

  // updateNode counts the node's policies by the state each tile shows
  // (shownState), from the policies themselves: every state of STATES
  // has a count, zero included.
  const updateNode = (n, list, rate) => {
    const c = Object.fromEntries(STATES.map((s) => [s, 0]));
    let inflight = 0, capacity = 0, load = 0, visible = 0;
    for (const p of list) {
      const state = shownState(p.state);
      c[state]++;
      inflight += p.inflight || 0;
      capacity += p.capacity || 0;
      load += p.load || 0;
      if (filter === null || filter === state) visible++;
    }
    setText(n.count, list.length + (list.length === 1 ? " policy" : " policies"));
    for (const s of STATES) {
      const m = n.states[s];
      setText(m.lastChild, c[s] + " " + s);
      m.classList.toggle("zero", c[s] === 0);
    }
    setText(n.flight, "in flight " + inflight + "/" + capacity + " · load " + fmtCount(load));
    setText(n.rate, fmtRate(rate) + "/s");
    n.root.hidden = visible === 0;
  };

  // ---- page -------------------------------------------------------------

  const byNodeThenIndex = (a, b) => {
    const na = a.node_id || NO_NODE, nb = b.node_id || NO_NODE;
    if (na !== nb) {
      if (na === NO_NODE) return 1; // policies without a node go last
      if (nb === NO_NODE) return -1;
      return na < nb ? -1 : 1;
    }
    return a.index - b.index;
  };

  const render = (s) => {
    const now = Date.parse(s.time) || Date.now();
    const uptime = s.uptime_seconds || 0;
    if (uptime < lastUptime) { // the router restarted: counters start again
      tiles.clear();
      for (const n of nodes.values()) n.root.remove();
      nodes.clear();
      order = "";
    }
    lastUptime = uptime;

    const policies = (s.policies || []).slice().sort(byNodeThenIndex);
    const poller = s.poller || {};
    const probes = probeCounts(poller);
    const interval = poller.interval_ms || 100;
    const pfx = prefixShown(s.prefix) ? new Map((s.prefix.policies || []).map((x) => [x.id, x])) : null;
    const lateMS = Math.max(5 * interval, interval + (poller.timeout_ms || 1000)) + 1500;

    const groups = new Map();
    const seen = new Set();
    const keys = [];
    for (const p of policies) {
      const node = p.node_id || NO_NODE;
      if (!groups.has(node)) {
        groups.set(node, []);
        keys.push("\u0000" + node);
      }
      groups.get(node).push(p);
      const key = p.index + "\u0001" + p.id;
      keys.push(key);
      seen.add(key);
      let t = tiles.get(key);
      if (!t) {
        t = newTile();
        tiles.set(key, t);
      }
      updateTile(t, p, now, lateMS, probes.span, pfx);
      t.node = node;
    }
    for (const [key, t] of tiles) {
      if (!seen.has(key)) {
        t.root.remove();
        tiles.delete(key);
      }
    }

    const main = $("nodes");
    for (const [id, n] of nodes) {
      if (!groups.has(id)) {
        n.root.remove();
        nodes.delete(id);
      }
    }
    for (const [id, list] of groups) {
      let n = nodes.get(id);
      if (!n) {
        n = newNode(id);
        nodes.set(id, n);
      }
      let rate = 0;
      for (const p of list) {
        const r = tiles.get(p.index + "\u0001" + p.id).r;
        if (r !== null) rate += r;
      }
      updateNode(n, list, rate);
    }
    const newOrder = keys.join("\u0002");
    if (newOrder !== order) { // registration changed: lay the page out again
      for (const [id, list] of groups) {
        const n = nodes.get(id);
        for (const p of list) n.grid.append(tiles.get(p.index + "\u0001" + p.id).root);
        main.append(n.root);
      }
      order = newOrder;
    }

    // header
    const tot = s.totals || {};
    for (const st of STATES) {
      const v = (tot[st] || 0) + (st === "unhealthy" ? tot.update_failed || 0 : 0);
      setText($("n-" + st), fmtCount(v));
      $("n-" + st).parentElement.classList.toggle("zero", v === 0);
    }
    setText($("router"), s.router ? "router: " + s.router : "");
    $("router").hidden = !s.router;
    const replica = s.replica;
    setText($("replica"), !replica ? "" : replica.leading ? "leader" : "follower · leader " + (replica.leader || "not elected"));
    $("replica").hidden = !replica;
    setText($("f-policies"), fmtCount(tot.policies || 0));
    const r = totalRate.add(now, (tot.selected_total || 0) + (tot.assigned_total || 0));
    setText($("f-rate"), fmtRate(r));
    setText($("f-inflight"), fmtCount(tot.inflight || 0));
    setText($("f-capacity"), fmtCount(tot.capacity || 0));
    setText($("f-load"), fmtCount(tot.load || 0));
    setText($("f-waiters"), fmtCount(s.waiters || 0));
    setText($("f-leases"), fmtCount(s.leases || 0));
    const sticky = s.sticky || {};
    const stickyN = (sticky.hits || 0) + (sticky.spills || 0) + (sticky.misses || 0);
    setText($("f-sticky"), stickyN > 0 ? (100 * (sticky.hit_rate || 0)).toFixed(1) + "%" : "—");
    setText($("f-sticky-n"), fmtCount(stickyN));
    setText($("f-uptime"), fmtDuration(uptime));
    setText($("f-update"), fmtUpdate(s.update));
    $("f-update").title = fmtUpdate(s.update) + "\n(the running rolling update, else the latest: GET /updates)";
    const pf = s.prefix;
    const showPrefix = prefixShown(pf);
    $("f-prefix-box").hidden = !showPrefix;
    if (showPrefix) {
      const f = prefixFigure(pf);
      setText($("f-prefix"), f.rate);
      setText($("f-prefix-n"), f.of);
      $("f-prefix-box").title = f.title;
    }
    setText($("f-floor"), fmtFloor(s));
    const alarm = floorAlarm(s);
    $("f-floor").classList.toggle("bad", alarm !== "");
    setText($("floor-banner"), alarm);
    $("floor-banner").hidden = alarm === "";
    setText($("f-probes"), s.poller ? fmtCount(probes.probes) : "—");
    setText($("f-failures"), s.poller ? fmtCount(probes.failures) : "—");
    setText($("f-probes-span"), s.poller ? probes.span : "—");
    $("f-probes-box").title = PROBES_TITLE + (s.poller ? "\n" + $("f-probes-box").querySelector("dd").textContent : "");
    if (s !== lastStats) { // red while probes keep failing: failures since start grew
      const failures = poller.failures_total || 0;
      $("f-failures").classList.toggle("bad", lastFailures !== null && failures > lastFailures);
      lastFailures = failures;
    }

    $("empty").hidden = policies.length !== 0;
    applyDensity(policies.length);
    lastStats = s;
  };

  const applyDensity = (n) => {
    const compact = density === "compact" || (density === "auto" && n > COMPACT_OVER);
    document.body.classList.toggle("compact", compact);
  };

  const setFilter = (state) => {
    filter = filter === state ? null : state;
    for (const b of document.querySelectorAll(".count")) {
      b.setAttribute("aria-pressed", String(b.dataset.state === filter));
    }
    if (lastStats) render(lastStats);
  };

  // ---- rolling update ---------------------------------------------------

  // The running update, else the latest one, policy by policy: read from
  // GET /updates/{id} once a second while it runs, once more when it
  // ends. Its document lists the policies its waves have taken; the
  // registered ones below the version that no wave has taken yet are
  // pending, from /stats.
  const PHASES = ["pending", "draining", "updating", "done", "failed"];
  const PHASE_ABBR = { pending: "WAIT", draining: "DRAIN", updating: "UPD", done: "DONE", failed: "FAIL" };
  const PENDING_WAVE = 0; // the group of the policies no wave has taken yet

  const ro = {
    key: "", // id and state of the document shown
    id: "", // the update shown
    groups: new Map(), // wave -> group
    items: new Map(), // policy id -> item
    order: "",
  };

  const newGroup = (wave) => {
    const g = {};
    g.root = el("section", "ro-wave");
    g.root.dataset.wave = String(wave);
    const head = el("div", "ro-wave-head");
    g.title = el("h3", "", wave === PENDING_WAVE ? "not in a wave yet" : "wave " + wave);
    g.current = el("span", "ro-current", "current wave");
    g.counts = el("span", "ro-counts");
    head.append(g.title, g.current, g.counts);
    g.list = el("ol", "ro-list");
    g.root.append(head, g.list);
    return g;
  };

  const newItem = () => {
    const it = {};
    it.root = el("li", "ro-p");
    const head = el("div", "ro-head");
    it.idx = el("span", "ro-idx");
    it.badge = el("span", "ro-phase");
    const g = el("i", "glyph");
    g.setAttribute("aria-hidden", "true");
    it.word = el("span", "word");
    it.abbr = el("span", "abbr");
    it.badge.append(g, it.word, it.abbr);
    head.append(it.idx, it.badge);
    it.step = el("div", "ro-step");
    it.ver = el("div", "ro-ver");
    it.err = el("div", "ro-err");
    it.root.append(head, it.step, it.ver, it.err);
    it.cls = "";
    return it;
  };

  const fmtCall = (c) => c.method + " " + c.path + " → " + (c.status || "no answer") +
    " in " + fmtMS(c.duration_ms) + (c.error ? ": " + c.error : "");

  const updateItem = (it, p, u) => {
    const phase = PHASES.includes(p.phase) ? p.phase : "other";
    const cls = "ro-p p-" + phase;
    if (it.cls !== cls) {
      it.root.className = cls;
      it.cls = cls;
    }
    it.root.dataset.phase = p.phase || "";
    it.root.dataset.wave = String(p.wave || 0);
    it.root.dataset.index = String(p.index);
    setText(it.idx, String(p.index));
    setText(it.word, p.phase || "?");
    setText(it.abbr, PHASE_ABBR[phase] || "?");
    // Where a policy in flight stands, and for how long: a number that
    // keeps growing is an update that hangs.
    let step = "";
    if (p.phase === "updating") step = (p.step || "starting") + " · " + fmtMS(p.in_step_ms);
    else if (p.phase === "draining") step = "for " + fmtMS(p.in_phase_ms);
    setText(it.step, step);
    it.step.hidden = step === "";
    const at = p.reported_version >= p.expected_version;
    setText(it.ver, at ? "v" + p.reported_version : "v" + (p.reported_version || 0) + " → v" + p.expected_version);
    it.ver.classList.toggle("at", at);
    it.ver.title = "reported version " + (p.reported_version || 0) + (p.weight_version ? " (" + p.weight_version + ")" : "") +
      ", expected " + p.expected_version;
    let err = p.error || "";
    if (!err && p.phase === "failed" && p.last_call && p.last_call.error) err = p.last_call.error;
    if (!err && p.drain_timed_out) err = "drain timed out: updated with work on it";
    setText(it.err, err);
    it.err.hidden = err === "";
    it.err.classList.toggle("warn", p.phase !== "failed" && !p.error);
    const title = [
      "policy " + p.index + " — " + (p.phase || "?") + (p.step ? " (" + p.step + ")" : "") +
        (p.wave ? " in wave " + p.wave : ", in no wave yet"),
      p.id ? "id: " + p.id : "",
      "node: " + (p.node_id || "(none)"),
      p.engine ? "engine: " + p.engine : "",
      p.in_phase_ms ? "in this phase for " + fmtMS(p.in_phase_ms) : "",
      "version: reported " + (p.reported_version || 0) + (p.weight_version ? " (" + p.weight_version + ")" : "") + ", expected " + p.expected_version,
      p.drain_timed_out ? "drain timed out after " + fmtMS(u.drain_timeout_ms) + ": updated with work still on it" : "",
      p.aborted_leases ? "leases aborted: " + p.aborted_leases : "",
      p.held ? "held: joined during the update, no work until it reaches v" + u.version : "",
      p.last_call ? "last call: " + fmtCall(p.last_call) : "",
      p.error ? "error: " + p.error : "",
    ].filter(Boolean).join("\n");
    if (it.root.title !== title) it.root.title = title;
  };

  // rolloutPolicies is every policy of the update (the server lists those
  // no wave has taken yet as pending), and how many registered policies it
  // leaves out as at its version already.
  const rolloutPolicies = (u, registered) => {
    const list = (u.policies || []).slice(); // sorted by the caller
    const taken = new Set(list.map((p) => p.id));
    const atVersion = (registered || []).filter((p) => !taken.has(p.id) && (p.version || 0) >= u.version).length;
    return { list, atVersion };
  };

  const renderRollout = (u, registered) => {
    if (u.id !== ro.id) { // another update: start afresh, opened
      for (const g of ro.groups.values()) g.root.remove();
      ro.groups.clear();
      ro.items.clear();
      ro.order = "";
      ro.id = u.id;
      $("ro-details").open = true;
    }
    const root = $("rollout");
    root.hidden = false;
    root.dataset.state = u.state;
    root.dataset.update = u.id;
    const running = u.state === "running";
    const { list, atVersion } = rolloutPolicies(u, registered);
    list.sort((a, b) => (a.wave || Infinity) - (b.wave || Infinity) || a.index - b.index);

    const counts = {};
    for (const p of list) counts[p.phase] = (counts[p.phase] || 0) + 1;
    const byPhase = ["updating", "draining", "failed", "done", "pending"].filter((ph) => counts[ph]).map((ph) => counts[ph] + " " + ph);
    setText($("ro-title"), "rolling update to v" + u.version + " · " + u.state);
    setText($("ro-meta"), [
      u.waves ? "wave " + u.waves + (running ? " running" : " last") : "no wave yet",
      byPhase.join(", "),
      atVersion ? atVersion + " at v" + u.version + " already" : "",
      running ? u.capacity_held + " out of routing" : "",
      u.failures ? u.failures + " failed of " + u.max_failures + " tolerated" : "",
      u.external ? "the trainer moves the weights" : u.model_path ? "from " + u.model_path : "",
      "started " + fmtClock(Date.parse(u.created)) + (u.ended ? ", ended " + fmtClock(Date.parse(u.ended)) : ""),
      "id " + shortID(u.id),
    ].filter(Boolean).join(" · "));
    setText($("ro-error"), u.error || "");
    $("ro-error").hidden = !u.error;
    setText($("ro-note"), "");
    $("ro-note").hidden = true;

    const seen = new Set();
    const waves = new Map();
    const keys = [];
    for (const p of list) {
      const wave = p.wave || PENDING_WAVE;
      if (!waves.has(wave)) {
        waves.set(wave, []);
        keys.push("w" + wave);
      }
      waves.get(wave).push(p);
      keys.push(p.id);
      seen.add(p.id);
      let it = ro.items.get(p.id);
      if (!it) {
        it = newItem();
        ro.items.set(p.id, it);
      }
      updateItem(it, p, u);
    }
    for (const [id, it] of ro.items) {
      if (!seen.has(id)) {
        it.root.remove();
        ro.items.delete(id);
      }
    }
    for (const [wave, g] of ro.groups) {
      if (!waves.has(wave)) {
        g.root.remove();
        ro.groups.delete(wave);
      }
    }
    for (const [wave, ps] of waves) {
      let g = ro.groups.get(wave);
      if (!g) {
        g = newGroup(wave);
        ro.groups.set(wave, g);
      }
      const current = running && wave === u.waves && wave !== PENDING_WAVE;
      g.root.classList.toggle("current", current);
      g.current.hidden = !current;
      if (current) g.root.setAttribute("aria-current", "step");
      else g.root.removeAttribute("aria-current");
      const c = {};
      for (const p of ps) c[p.phase] = (c[p.phase] || 0) + 1;
      setText(g.counts, Object.entries(c).map(([ph, n]) => n + " " + ph).join(", "));
    }
    const order = keys.join("\u0001");
    if (order !== ro.order) { // a wave started or the registration changed
      const box = $("ro-waves");
      for (const [wave, ps] of waves) {
        const g = ro.groups.get(wave);
        for (const p of ps) g.list.append(ro.items.get(p.id).root);
        box.append(g.root);
      }
      ro.order = order;
    }
  };

  // readUpdate reads the update /stats names and shows it; it leaves an
  // ended update it has shown alone. A failure shows in the panel only:
  // the tiles do not depend on it.
  const readUpdate = async (sum, headers, registered) => {
    if (!sum) {
      $("rollout").hidden = true;
      ro.key = "";
      return;
    }
    if (sum.state !== "running" && ro.key === sum.id + "\u0001" + sum.state) return;
    const ctl = new AbortController();
    const t = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
    try {
      const res = await fetch(UPDATES_URL + encodeURIComponent(sum.id), { headers, cache: "no-store", credentials: "same-origin", signal: ctl.signal });
      if (!res.ok) {
        const msg = await errorMessage(res);
        throw new Error("it answered " + res.status + (msg ? ": " + msg : ""));
      }
      const u = await res.json();
      renderRollout(u, registered);
      ro.key = u.id + "\u0001" + u.state;
    } catch (e) {
      const why = e && e.name === "AbortError" ? "no answer within " + FETCH_TIMEOUT_MS / 1000 + " s" : String((e && e.message) || e);
      ro.key = "";
      $("rollout").hidden = false;
      if (ro.id !== sum.id) {
        setText($("ro-title"), "rolling update to v" + sum.version + " · " + sum.state);
        setText($("ro-meta"), fmtUpdate(sum));
      }
      setText($("ro-note"), "Cannot read GET /updates/" + sum.id + ": " + why + "." + (ro.id === sum.id ? " The phases below are from an earlier read." : ""));
      $("ro-note").hidden = false;
    } finally {
      clearTimeout(t);
    }
  };

  // ---- connection -------------------------------------------------------

  const setConn = (status, text) => {
    $("conn").dataset.status = status;
    setText($("conn-text"), text);
    document.body.classList.toggle("stale", status === "error");
  };

  const showBanner = (text) => {
    const b = $("banner");
    setText(b, text || "");
    b.hidden = !text;
  };

  const showAuth = (status, message, sentToken) => {
    $("auth").hidden = false;
    if (status === 403) {
      setText($("auth-title"), "This token lacks scope read");
      setText($("auth-text"), "The router accepted the token but it does not grant scope read, which GET /stats needs. Paste a token with scope read.");
    } else if (sentToken) {
      setText($("auth-title"), "The token was refused");
      setText($("auth-text"), "The router refused the stored token (expired, or signed with another key). Paste a fresh bearer token with scope read; it is kept in this browser tab only (sessionStorage) and sent as an Authorization header.");
    } else {
      setText($("auth-title"), "A token with scope read is needed");
      setText($("auth-text"), "This router requires a bearer token with scope read to show its statistics (GET /stats). Paste one below; it is kept in this browser tab only (sessionStorage) and sent as an Authorization header.");
    }
    setText($("auth-detail"), message ? "router said: " + message : "");
    setConn("auth", status === 403 ? "forbidden: token lacks scope read" : "token needed");
  };

  const errorMessage = async (res) => {
    try {
      const body = await res.json();
      return (body && body.error && body.error.message) || "";
    } catch {
      return "";
    }
  };

  const refresh = async () => {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = "Bearer " + token;
    const ctl = new AbortController();
    const t = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
    try {
      const res = await fetch(STATS_URL, { headers, cache: "no-store", credentials: "same-origin", signal: ctl.signal });
      if (res.status === 401 || res.status === 403) {
        showAuth(res.status, await errorMessage(res), Boolean(token));
        showBanner("");
        return AUTH_RETRY_MS;
      }
      if (!res.ok) {
        const msg = await errorMessage(res);
        throw new Error("GET /stats answered " + res.status + (msg ? ": " + msg : ""));
      }
      const s = await res.json();
      if (!editingToken) $("auth").hidden = true;
      $("token-button").hidden = !token;
      render(s);
      drawCharts(s, Date.now());
      setConn("live", "live");
      setText($("updated"), "updated " + fmtClock(Date.parse(s.time) || Date.now()));
      showBanner("");
      await readUpdate(s.update, headers, s.policies);
      return REFRESH_MS;
    } catch (e) {
      const why = e && e.name === "AbortError" ? "no answer within " + FETCH_TIMEOUT_MS / 1000 + " s" : String((e && e.message) || e);
      setConn("error", "connection lost, retrying");
      showBanner("Cannot read /stats: " + why + "." + (lastStats ? " The tiles below are from " + fmtClock(Date.parse(lastStats.time)) + "." : ""));
      return REFRESH_MS;
    } finally {
      clearTimeout(t);
    }
  };

  const schedule = (ms) => {
    clearTimeout(timer);
    timer = setTimeout(tick, ms);
  };

  const tick = async () => {
    if (document.hidden || inflight) return; // resumed by visibilitychange
    inflight = true;
    const start = performance.now();
    let next = REFRESH_MS;
    try {
      next = await refresh();
    } finally {
      inflight = false;
    }
    schedule(Math.max(0, next - (performance.now() - start)));
  };

  // ---- wiring -----------------------------------------------------------

  let drawCharts = () => {};

  const init = () => {
    if (window.policyrouterCharts) drawCharts = window.policyrouterCharts.create($("charts"));
    for (const b of document.querySelectorAll(".count")) {
      b.addEventListener("click", () => setFilter(b.dataset.state));
    }
    const sel = $("density");
    sel.value = density;
    sel.addEventListener("change", () => {
      density = sel.value;
      sessionStorage.setItem(DENSITY_KEY, density);
      applyDensity(lastStats ? (lastStats.policies || []).length : 0);
    });
    $("auth-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const v = $("token").value.trim().replace(/^bearer\s+/i, "");
      $("token").value = "";
      if (v) sessionStorage.setItem(TOKEN_KEY, v);
      editingToken = false;
      schedule(0);
    });
    $("forget").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      $("token-button").hidden = true;
      editingToken = false;
      schedule(0);
    });
    $("token-button").addEventListener("click", () => {
      editingToken = true;
      $("auth").hidden = false;
      setText($("auth-title"), "Change the bearer token");
      setText($("auth-detail"), "");
      $("token").focus();
    });
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden) schedule(0);
    });
    schedule(0);
  };

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
