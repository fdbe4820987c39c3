package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/internal/updatesim"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// smokeRollout are the flags of the CI smoke run: a tiny workload, every
// strategy, one overloaded load, about a second per strategy.
var smokeRollout = []string{
	"-envs", "8", "-turns", "3", "-policies", "4", "-nodes", "2",
	"-gen-median", "20ms", "-cross-node", "2ms", "-sticky-wait", "20ms",
	"-loads", "1.25", "-duration", "1s", "-sample", "250ms", "-seed", "7",
}

// TestRolloutSmoke runs the simulator end to end and checks its report is
// sane: every strategy ran episodes, the figures and ratios are in range,
// the table names every strategy and the charts are well-formed SVG.
func TestRolloutSmoke(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	args := append(append([]string{}, smokeRollout...), "-json", "-charts", dir)
	if err := run(context.Background(), args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var rep rolloutReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("decode the report: %v\n%s", err, out.String())
	}
	if rep.Workload.Seed != 7 || rep.Workload.Envs != 8 {
		t.Errorf("workload %+v does not echo the flags", rep.Workload)
	}
	if len(rep.Loads) != 1 || len(rep.Loads[0].Strategies) != len(strategies) {
		t.Fatalf("got %d loads, want 1 with %d strategies: %s", len(rep.Loads), len(strategies), out.String())
	}
	lr := rep.Loads[0]
	if lr.OracleEPS <= 0 {
		t.Errorf("oracle episodes/s %v, want positive", lr.OracleEPS)
	}
	inRange := func(name string, v, lo, hi float64) {
		t.Helper()
		if !(v >= lo && v <= hi) {
			t.Errorf("%s = %v, want in [%v, %v]", name, v, lo, hi)
		}
	}
	for i, r := range lr.Strategies {
		if r.Strategy != strategies[i].Name {
			t.Errorf("strategy %d is %q, want %q", i, r.Strategy, strategies[i].Name)
		}
		if r.Turns == 0 || r.EpisodesPerSecond <= 0 {
			t.Errorf("%s ran %d turns, %v episodes/s; want some", r.Strategy, r.Turns, r.EpisodesPerSecond)
		}
		// Ratios to the best possible may pass 1 only by the noise of a
		// short run (the oracle is an expectation); not by much.
		inRange(r.Strategy+" episodes ratio", r.EpisodesRatio, 0.01, 1.5)
		inRange(r.Strategy+" utilisation", r.Utilisation, 0.01, 1.0001)
		inRange(r.Strategy+" utilisation bound", r.UtilBound, 0.01, 1)
		inRange(r.Strategy+" utilisation ratio", r.UtilRatio, 0.01, 1.5)
		inRange(r.Strategy+" hit rate", r.HitRate, 0, 1)
		inRange(r.Strategy+" hit ratio", r.HitRatio, 0, 1.0001)
		inRange(r.Strategy+" cross-node fraction", r.CrossNode, 0, 1)
		inRange(r.Strategy+" wait p50", r.WaitP50MS, 0, r.WaitP99MS)
		if len(r.UtilisationSeries) == 0 {
			t.Errorf("%s has no utilisation samples", r.Strategy)
		}
	}
	if rr := lr.Strategies[0]; rr.CrossNode != 0 {
		t.Errorf("round robin (node_affinity) sent %v of turns across nodes, want none: every node has policies", rr.CrossNode)
	}
	if len(rep.Aims) != 3 {
		t.Errorf("aims %+v: want three", rep.Aims)
	}

	files, err := filepath.Glob(filepath.Join(dir, "*.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("charts %v, want two", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkSVG(t, f, b)
		if n := bytes.Count(b, []byte("<polyline")); n != len(strategies) {
			t.Errorf("%s has %d lines, want one per strategy (%d)", f, n, len(strategies))
		}
	}
}

// checkSVG fails unless b parses as XML with an svg root element.
func checkSVG(tb testing.TB, name string, b []byte) {
	tb.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			tb.Fatalf("%s is not XML: %v", name, err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		tb.Errorf("%s: root element %q, want svg", name, root)
	}
}

// The multi-turn configuration: every env worker runs one episode with no
// env step between turns (load E/P), on one node, without and with
// sessions; the run ends when the last episode has.
func TestRolloutEpisodes(t *testing.T) {
	var out bytes.Buffer
	args := []string{"-json", "-envs", "8", "-turns", "3", "-policies", "2", "-nodes", "1", "-loads", "4",
		"-episodes", "1", "-gen-median", "5ms", "-cache", "4", "-sticky-wait", "200ms", "-duration", "20s",
		"-strategies", "fifo,idle_affinity+session"}
	if err := run(context.Background(), args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var rep rolloutReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if got := rep.Loads[0].EnvStepMS; got != 0 {
		t.Errorf("env step %v ms at load E/P, want 0", got)
	}
	for _, r := range rep.Loads[0].Strategies {
		if r.Episodes != 8 || r.Turns != 24 {
			t.Errorf("%s: %d episodes, %d turns; want 8 and 24", r.Strategy, r.Episodes, r.Turns)
		}
		if r.Seconds <= 0 || r.Seconds >= 20 {
			t.Errorf("%s ran %v s; want it to end with its last episode, before -duration", r.Strategy, r.Seconds)
		}
		counted := r.Sticky.Hits + r.Sticky.Spills + r.Sticky.Misses
		if want := map[bool]uint64{false: 0, true: 24}[r.Sessions]; counted != want {
			t.Errorf("%s: sticky counters %+v, want %d counted", r.Strategy, r.Sticky, want)
		}
	}
	if s := rep.Loads[0].Strategies[1]; s.Sticky.Hits == 0 || s.HitRate == 0 {
		t.Errorf("sessions: sticky %+v, hit rate %v; want hits", s.Sticky, s.HitRate)
	}
}

// The update configuration: every update strategy runs one whole update
// on the same workload against the real router, with the model beside it.
// The period leaves each update about 4x the time it takes, so that a
// loaded machine does not push it past the window.
func TestRolloutUpdateStrategies(t *testing.T) {
	var out bytes.Buffer
	args := []string{"-envs", "8", "-turns", "2", "-policies", "4", "-nodes", "2", "-loads", "2",
		"-gen-median", "20ms", "-cache", "0", "-cross-node", "0", "-strategies", "idle_affinity",
		"-update-every", "1s", "-updates", "1", "-update-time", "50ms", "-update-rolling", "2",
		"-poll-interval", "20ms", "-sample", "100ms", "-json"}
	if err := run(context.Background(), args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var rep rolloutReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	rs := rep.Loads[0].Strategies
	if len(rs) != len(updatesim.Strategies) {
		t.Fatalf("got %d runs, want one per update strategy", len(rs))
	}
	for i, st := range updatesim.Strategies {
		r := rs[i]
		want := map[bool]int{false: 1, true: 0}[st.Pause == ""]
		if r.Update != st.Name || r.Updates == nil || r.Updates.Live.Updates != want || r.Updates.Model.Updates != want || r.Turns == 0 {
			t.Errorf("run %d: %s, %+v, %d turns; want %s with %d whole update live and in the model, some turns", i, r.Update, r.Updates, r.Turns, st.Name, want)
		}
		if r.Updates == nil {
			continue
		}
		// 4 policies, k = 2: rolling keeps at least 2 in routing,
		// pause-all none, no update all 4.
		if got := r.Updates.Live.MinRoutable; (st.Rolling && got < 2) || (!st.Rolling && st.Pause != "" && got != 0) || (st.Pause == "" && got != 4) {
			t.Errorf("run %d (%s): %d policies routable at the least", i, st.Name, got)
		}
	}
}

func TestRolloutTable(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), append(append([]string{}, smokeRollout...), "-strategies", "fifo,idle_affinity"), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fifo", "idle_affinity", "oracle", "aims:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "round_robin") {
		t.Errorf("table shows a strategy not asked for:\n%s", out.String())
	}
}

func TestRolloutFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string // in the error
	}{
		{[]string{"-envs", "0"}, "-envs"},
		{[]string{"-turns", "0"}, "-turns"},
		{[]string{"-nodes", "17"}, "-nodes"},
		{[]string{"-envs", "3", "-nodes", "4", "-policies", "4", "-loads", "0.5"}, "-nodes"},
		{[]string{"-gen-median", "0s"}, "-gen-median"},
		{[]string{"-gen-sigma", "-1"}, "-gen-sigma"},
		{[]string{"-loads", "0"}, "-loads"},
		{[]string{"-loads", "x"}, "-loads"},
		{[]string{"-loads", ","}, "-loads"},
		{[]string{"-loads", "3"}, "needs at least 48 env workers"},
		{[]string{"-episodes", "-1"}, "-episodes"},
		{[]string{"-updates", "-1"}, "-updates"},
		{[]string{"-update-strategies", "sometimes"}, "unknown strategy"},
		{[]string{"-update-every", "1s", "-update-strategies", ","}, "-update-strategies"},
		{[]string{"-speedup", "0.5"}, "-speedup"},
		{[]string{"-load-factor", "0.5"}, "-load-factor"},
		{[]string{"-duration", "0s"}, "-duration"},
		{[]string{"-sample", "1ms"}, "-sample"},
		{[]string{"-update-every", "-1s"}, "-update-every"},
		{[]string{"-update-every", "-1s"}, "-update-every"},
		{[]string{"-update-rolling", "0"}, "-update-rolling"},
		{[]string{"-strategies", "random"}, "unknown strategy"},
		{[]string{"-poll-interval", "0s"}, "-poll-interval"},
		{[]string{"extra"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := parseRolloutConfig(tt.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
	c, err := parseRolloutConfig([]string{"-strategies", "fifo, fifo,idle_affinity+session"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Strategies, ","); got != "fifo,idle_affinity+session" {
		t.Errorf("strategies %q, want fifo,idle_affinity+session", got)
	}
}

func TestRolloutWorkloadMath(t *testing.T) {
	c := rolloutConfig{Envs: 30, Turns: 5, Policies: 10, GenMedian: 100 * time.Millisecond, Cache: 4, Speedup: 4}
	if got, want := c.meanGeneration(), 100*time.Millisecond; got != want {
		t.Errorf("mean generation at sigma 0 = %v, want %v", got, want)
	}
	// load 1: E g / (s + g) = P  =>  s = g (E/P - 1) = 200 ms.
	if got, want := c.envStepMean(1), 200*time.Millisecond; got != want {
		t.Errorf("env step at load 1 = %v, want %v", got, want)
	}
	// Oracle turn: (1 + 4/4) / 5 of 100 ms = 40 ms. Env-bound: 30 / (5 *
	// 0.24) = 25 episodes/s; policy-bound: 10 / (5 * 0.04) = 50.
	if got, want := c.oracleEpisodesPerSecond(1), 25.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("oracle at load 1 = %v, want %v", got, want)
	}
	if got, want := c.bestHitRate(), 0.8; math.Abs(got-want) > 1e-12 {
		t.Errorf("best hit rate = %v, want %v", got, want)
	}
	c.Cache = 0
	if got := c.bestHitRate(); got != 0 {
		t.Errorf("best hit rate without a cache = %v, want 0", got)
	}
	if got, want := c.oracleGeneration(), 0.1; math.Abs(got-want) > 1e-12 {
		t.Errorf("oracle generation without a cache = %v s, want %v", got, want)
	}
	c.GenSigma = 1
	if got, want := c.meanGeneration(), time.Duration(100e6*math.Exp(0.5)); got != want {
		t.Errorf("mean generation at sigma 1 = %v, want %v", got, want)
	}
}

func TestJudgeAims(t *testing.T) {
	cfg := rolloutConfig{Turns: 10, Cache: 8}
	mk := func(name string, util, p99, hitRatio float64) *strategyResult {
		return &strategyResult{Strategy: name, UtilRatio: util, WaitP99MS: p99, HitRatio: hitRatio}
	}
	loads := []rolloutLoad{
		{Load: 0.8, Strategies: []*strategyResult{
			mk("fifo", 0.5, 100, 0.1), mk("idle_affinity", 0.5, 110, 0.2), mk("idle_affinity+session", 0.5, 90, 0.95),
		}},
		{Load: 1.5, Strategies: []*strategyResult{
			mk("fifo", 0.97, 100, 0.1), mk("idle_affinity", 0.96, 130, 0.2),
		}},
	}
	aims := judgeAims(cfg, loads)
	want := []*bool{ptr(true), ptr(false), ptr(true), nil}
	for i, a := range aims {
		if (a.Met == nil) != (want[i] == nil) || (a.Met != nil && *a.Met != *want[i]) {
			t.Errorf("aim %q: met %v, want %v (%s)", a.Aim, show(a.Met), show(want[i]), a.Detail)
		}
	}
	// Without the 0.8 load the sticky aim cannot be judged.
	if a := judgeAims(cfg, loads[1:])[2]; a.Met != nil {
		t.Errorf("sticky aim judged without its load: %s", a.Detail)
	}
}

func ptr(b bool) *bool { return &b }

func show(b *bool) string {
	if b == nil {
		return "n/a"
	}
	return metWord(*b)
}

func TestChartsAreDeterministic(t *testing.T) {
	rep := &rolloutReport{Workload: rolloutWorkload{DurationS: 2, Seed: 3}}
	lr := rolloutLoad{Load: 1.25, UtilBound: 1, Strategies: []*strategyResult{
		{Strategy: "fifo", UtilisationSeries: []float64{0.5, 0.9, 1.2, 0.95}, waits: []time.Duration{0, time.Millisecond, 40 * time.Millisecond}},
		{Strategy: "idle_affinity+session<&>"}, // no data: drawn in the legend only, escaped
	}}
	for name, draw := range map[string]func(*rolloutReport, rolloutLoad) []byte{"utilisation": utilisationChart, "wait": waitChart} {
		a, b := draw(rep, lr), draw(rep, lr)
		if !bytes.Equal(a, b) {
			t.Errorf("%s chart differs between two drawings of the same figures", name)
		}
		checkSVG(t, name, a)
		if n := bytes.Count(a, []byte("<polyline")); n != 1 {
			t.Errorf("%s chart has %d lines, want 1", name, n)
		}
	}
}

func TestDecadeAndNiceStep(t *testing.T) {
	for _, tt := range []struct {
		e    float64
		want string
	}{{-2, "0.01"}, {-1, "0.1"}, {math.Log10(0.1), "0.1"}, {0, "1"}, {3, "1000"}} {
		if got := decade(tt.e); got != tt.want {
			t.Errorf("decade(%v) = %q, want %q", tt.e, got, tt.want)
		}
	}
	for _, tt := range []struct{ x, want float64 }{{0.3, 0.5}, {1, 1}, {3, 5}, {12, 20}, {0, 1}} {
		if got := niceStep(tt.x); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("niceStep(%v) = %v, want %v", tt.x, got, tt.want)
		}
	}
}

// maxOut counts the policies out of routing at once from their drain and
// end times; a wave that starts as the last one ends does not overlap it.
func TestMaxOut(t *testing.T) {
	at := func(ms int) *time.Time { v := time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond); return &v }
	ps := []api.UpdatePolicy{
		{Drained: at(0), Ended: at(10)}, {Drained: at(0), Ended: at(12)}, // wave 1
		{Drained: at(12), Ended: at(20)}, {Drained: at(10), Ended: at(20)}, // wave 2, as slots free
		{}, // pending: never out
	}
	if got := maxOut(ps); got != 2 {
		t.Errorf("maxOut = %d, want 2", got)
	}
	ps[2].Drained = at(11) // drained before policy 1 ended
	if got := maxOut(ps); got != 3 {
		t.Errorf("maxOut = %d, want 3", got)
	}
}
