package routing

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/policyrouter/policyrouter/internal/prereq"
)

// TestSeedOracle checks the routers against the seed itself: it writes
// random cases as JSON, has testdata/seed_oracle.py (the seed's four router
// classes, unchanged) answer them, and compares with the Go answers.

// oracleCase is one case of seed_oracle.py's input; see its docstring.
type oracleCase struct {
	Kind string `json:"kind"`
	// EnvIDs null means none (the seed's NodeAffinityRouter then is
	// SimpleRouter).
	EnvIDs        []string              `json:"env_ids"`
	Loads         []int64               `json:"loads,omitempty"`
	NumTasks      int                   `json:"num_tasks"`
	NumPolicies   int                   `json:"num_policies,omitempty"`
	Topology      map[string]oracleNode `json:"topology"`
	PolicyNodeIDs []*string             `json:"policy_node_ids,omitempty"`
	Ops           [][]any               `json:"ops,omitempty"`
	// check compares the seed's answer with the Go code's.
	check func(answer json.RawMessage)
}

type oracleIDs struct {
	IDs []int `json:"ids"`
}

type oracleNode struct {
	Env  oracleIDs `json:"env"`
	Eval oracleIDs `json:"eval"`
}

func oracleTopology(t Topology) map[string]oracleNode {
	out := map[string]oracleNode{}
	for node := range t {
		out[node] = oracleNode{Env: oracleIDs{IDs: t.Env(node)}, Eval: oracleIDs{IDs: t.Eval(node)}}
	}
	return out
}

// runOracle feeds cases to seed_oracle.py and returns its answers.
func runOracle(t *testing.T, cases []oracleCase) []json.RawMessage {
	t.Helper()
	python := prereq.LookPath(t, "python3", "needed to run the seed")
	in, err := json.Marshal(map[string]any{"cases": cases})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), python, "testdata/seed_oracle.py")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("seed_oracle.py: %v\n%s", err, stderr.Bytes())
	}
	var res struct {
		Answers []json.RawMessage `json:"answers"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("seed_oracle.py answer: %v", err)
	}
	if len(res.Answers) != len(cases) {
		t.Fatalf("seed_oracle.py answered %d cases of %d", len(res.Answers), len(cases))
	}
	return res.Answers
}

// wantSeedInts compares a list answer of the seed with got.
func wantSeedInts(t *testing.T, what string, answer json.RawMessage, got []int) {
	t.Helper()
	var want []int
	if err := json.Unmarshal(answer, &want); err != nil {
		t.Fatalf("%s: seed answered %s", what, answer)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: Go %v; seed %v", what, got, want)
	}
}

func TestSeedOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	var cases []oracleCase
	add := func(c oracleCase) { cases = append(cases, c) }

	for range 1500 {
		add(simpleOracleCase(t, r))
		add(nodeAffinityOracleCase(t, r))
		add(syncSimpleOracleCase(t, r))
		add(syncNodeAffinityOracleCase(t, r))
	}
	for _, c := range parseOracleCases(t, r) {
		add(c)
	}

	answers := runOracle(t, cases)
	for i, c := range cases {
		c.check(answers[i])
		if t.Failed() {
			in, _ := json.Marshal(c)
			t.Fatalf("case %d (%s) failed: %s", i, c.Kind, in)
		}
	}
}

func simpleOracleCase(t *testing.T, r *rand.Rand) oracleCase {
	loads := genLoads(r, 1+r.IntN(16))
	n := r.IntN(3 * len(loads))
	return oracleCase{Kind: "simple", Loads: loads, NumTasks: n, check: func(a json.RawMessage) {
		got, err := LeastLoaded(loads, n)
		if err != nil {
			t.Fatal(err)
		}
		wantSeedInts(t, "LeastLoaded", a, got)
	}}
}

func nodeAffinityOracleCase(t *testing.T, r *rand.Rand) oracleCase {
	c := genCase(r, false)
	st := newState(t, Options{}, c.policies, c.topo)
	snap := st.Snapshot()
	nodeIDs := make([]*string, len(c.loads))
	for i := range nodeIDs {
		if pos, ok := snap.ByIndex(i); ok && snap.Node(pos) != "" {
			node := snap.Node(pos)
			nodeIDs[i] = &node
		}
	}
	oc := oracleCase{Kind: "node_affinity", Loads: c.loads, Topology: oracleTopology(c.topo), PolicyNodeIDs: nodeIDs}
	req := AssignRequest{Kind: AssignNodeAffinity, Loads: c.loads}
	if len(c.envIDs) > 0 && r.IntN(8) != 0 {
		oc.EnvIDs, oc.NumTasks = c.envIDs, len(c.envIDs)
		req.EnvIDs, req.NumTasks = c.envIDs, len(c.envIDs)
	} else {
		oc.NumTasks = r.IntN(2 * len(c.loads))
		req.NumTasks = oc.NumTasks
	}
	oc.check = func(a json.RawMessage) {
		got, err := st.Assign(req)
		if err != nil {
			t.Fatal(err)
		}
		wantSeedInts(t, "Assign(node affinity)", a, got.Indices)
	}
	return oc
}

// syncSimpleOracleCase draws selects and releases where the seed's order is
// defined: the seed takes released policies back only when its deque runs
// empty, in index order (it iterates a set), so releases since then go in
// ascending index order. The service takes them back in release order at
// once, which then gives the same sequence.
func syncSimpleOracleCase(t *testing.T, r *rand.Rand) oracleCase {
	p := 1 + r.IntN(6)
	deque := make([]int, p) // the seed's deque
	for i := range deque {
		deque[i] = i
	}
	var pending []int // released, not yet back in the seed's deque
	busy := map[int]bool{}
	var ops [][]any
	for range 40 {
		if r.IntN(3) == 0 {
			var cand []int
			for i := range p {
				if busy[i] && (len(pending) == 0 || i > pending[len(pending)-1]) {
					cand = append(cand, i)
				}
			}
			if len(cand) > 0 {
				i := cand[r.IntN(len(cand))]
				delete(busy, i)
				pending = append(pending, i)
				ops = append(ops, []any{"release", []int{i}})
				continue
			}
		}
		if len(deque) == 0 {
			deque, pending = pending, nil
		}
		if len(deque) == 0 {
			continue
		}
		busy[deque[0]] = true
		deque = deque[1:]
		ops = append(ops, []any{"select"})
	}
	return oracleCase{Kind: "sync_simple", NumPolicies: p, Ops: ops, check: func(a json.RawMessage) {
		st := newState(t, Options{}, densePolicies(p), Topology{})
		lease := map[int]uint64{}
		var got []int
		for _, op := range ops {
			if op[0] == "select" {
				sel := mustSelect(t, st, SelectIdle, "")
				lease[sel.Policy.Index] = sel.Lease
				got = append(got, sel.Policy.Index)
				continue
			}
			for _, i := range op[1].([]int) {
				mustRelease(t, st, lease[i])
			}
		}
		wantSeedInts(t, "Select(SelectIdle) sequence", a, got)
	}}
}

func syncNodeAffinityOracleCase(t *testing.T, r *rand.Rand) oracleCase {
	c := genCase(r, true)
	return oracleCase{Kind: "sync_node_affinity", NumPolicies: len(c.policies), Topology: oracleTopology(c.topo), EnvIDs: append([]string{}, c.envIDs...), check: func(a json.RawMessage) {
		st := newState(t, Options{}, c.policies, c.topo)
		got := []int{}
		for _, e := range c.envIDs {
			got = append(got, mustSelect(t, st, SelectRoundRobin, e).Policy.Index)
		}
		wantSeedInts(t, "Select(SelectRoundRobin) sequence", a, got)
	}}
}

// parseOracleCases asks the seed to parse random env ids and, around every
// code point of the Basic Multilingual Plane, "env-<c>3", "env-3<c>" and
// "env-<c>". (Beyond it, Unicode versions differ in which characters are
// decimal digits: Python 3.11 has Unicode 14, Go 1.26 Unicode 15.) Worker
// numbers the routing tables cannot hold are unknown to ParseEnvWorker; the
// seed finds no node for them either.
func parseOracleCases(t *testing.T, r *rand.Rand) []oracleCase {
	var random []string
	for range 3000 {
		random = append(random, genEnvID(r, 1+r.IntN(40)))
	}
	var bmp []string
	for c := rune(0); c <= 0xFFFF; c++ {
		if !utf8.ValidRune(c) {
			continue
		}
		s := string(c)
		bmp = append(bmp, "env-"+s+"3", "env-3"+s, "env-"+s)
	}
	var out []oracleCase
	for _, ids := range [][]string{random, bmp} {
		out = append(out, oracleCase{Kind: "parse", EnvIDs: ids, check: func(a json.RawMessage) {
			var want []*json.Number
			if err := json.Unmarshal(a, &want); err != nil || len(want) != len(ids) {
				t.Fatalf("seed answered %.200s", a)
			}
			bad := 0
			for i, id := range ids {
				w, ok := ParseEnvWorker(id)
				seed := -1 // None, or too large for the routing tables
				if want[i] != nil {
					if v, err := strconv.Atoi(want[i].String()); err == nil && v < MaxIndex {
						seed = v
					}
				}
				if got := map[bool]int{true: w, false: -1}[ok]; got != seed {
					t.Errorf("ParseEnvWorker(%q) = %d, %v; seed %v", id, w, ok, want[i])
					if bad++; bad == 20 {
						t.FailNow()
					}
				}
			}
		}})
	}
	return out
}
