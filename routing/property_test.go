package routing

import (
	"context"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The property tests run the real routers and the plain re-statements of
// the seed in reference_test.go on thousands of random inputs, drawn from a
// fixed seed so that a failure reproduces.

const propertyCases = 3000

// propertyRand returns the test's own deterministic source.
func propertyRand(t *testing.T) *rand.Rand {
	t.Helper()
	h := fnv.New64a()
	h.Write([]byte(t.Name()))
	return rand.New(rand.NewPCG(20260102, h.Sum64()))
}

func TestLeastLoadedMatchesReference(t *testing.T) {
	r := propertyRand(t)
	for i := range propertyCases {
		p := 1 + r.IntN(20)
		if r.IntN(20) == 0 {
			p = 100 + r.IntN(300)
		}
		loads := genLoads(r, p)
		n := r.IntN(4 * p)
		got, err := LeastLoaded(loads, n)
		if err != nil {
			t.Fatalf("case %d: LeastLoaded(%v, %d): %v", i, loads, n, err)
		}
		if want := refSimple(loads, n); !slices.Equal(got, want) {
			t.Fatalf("case %d: LeastLoaded(%v, %d) = %v; reference %v", i, loads, n, got, want)
		}
	}
}

func TestNodeAffinityMatchesReference(t *testing.T) {
	r := propertyRand(t)
	for i := range propertyCases {
		c := genCase(r, false)
		// The candidates are the registered policies, in index order.
		ps := slices.Clone(c.policies)
		slices.SortFunc(ps, func(a, b Policy) int { return a.Index - b.Index })
		in := AffinityInput{EnvNode: map[int]string{}, EnvIDs: c.envIDs}
		var refNodes []string
		for _, p := range ps {
			in.Indices = append(in.Indices, p.Index)
			in.Loads = append(in.Loads, c.loads[p.Index])
			node := refPolicyNode(c.topo, p)
			in.Nodes = append(in.Nodes, node)
			refNodes = append(refNodes, node)
		}
		for node := range c.topo {
			for _, e := range c.topo.Env(node) {
				in.EnvNode[e] = node
			}
		}
		got, err := NodeAffinity(in)
		if len(in.Indices) == 0 {
			if !errors.Is(err, ErrNoPolicies) {
				t.Fatalf("case %d: no candidates: %v, %v; want ErrNoPolicies", i, got, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("case %d: NodeAffinity: %v", i, err)
		}
		var want []int
		for _, pos := range refNodeAffinity(c.topo, refNodes, in.Loads, len(c.envIDs), c.envIDs) {
			want = append(want, in.Indices[pos])
		}
		if !slices.Equal(got, want) {
			t.Fatalf("case %d: NodeAffinity(%+v) = %v; reference %v", i, in, got, want)
		}
	}
}

func TestAssignStatelessMatchesReference(t *testing.T) {
	r := propertyRand(t)
	for i := range propertyCases {
		c := genCase(r, false)
		st := newState(t, Options{}, c.policies, c.topo)
		nodes := nodesOf(c, len(c.loads))

		got, err := st.Assign(AssignRequest{Kind: AssignNodeAffinity, NumTasks: len(c.envIDs), Loads: c.loads, EnvIDs: c.envIDs})
		if err != nil {
			t.Fatalf("case %d: Assign: %v", i, err)
		}
		if want := refNodeAffinity(c.topo, nodes, c.loads, len(c.envIDs), c.envIDs); !slices.Equal(got.Indices, want) {
			t.Fatalf("case %d: node affinity over %+v = %v; reference %v", i, c, got.Indices, want)
		}

		n := r.IntN(3 * len(c.loads))
		kind := []Assigner{AssignLeastLoaded, AssignNodeAffinity}[r.IntN(2)]
		got, err = st.Assign(AssignRequest{Kind: kind, NumTasks: n, Loads: c.loads})
		if err != nil {
			t.Fatalf("case %d: Assign: %v", i, err)
		}
		if want := refSimple(c.loads, n); !slices.Equal(got.Indices, want) {
			t.Fatalf("case %d: kind %T without env ids over %v = %v; reference %v", i, kind, c.loads, got.Indices, want)
		}
	}
}

// TestAssignTrackedMatchesReference runs random sequences of tracked
// assignments, completions and drains; the reference keeps its own loads
// and routes over the available policies in index order.
func TestAssignTrackedMatchesReference(t *testing.T) {
	r := propertyRand(t)
	for i := range propertyCases / 10 {
		c := genCase(r, false)
		if len(c.policies) == 0 {
			continue
		}
		st := newState(t, Options{}, c.policies, c.topo)
		ps := slices.Clone(c.policies)
		slices.SortFunc(ps, func(a, b Policy) int { return a.Index - b.Index })
		load := make([]int64, len(ps))
		draining := make([]bool, len(ps))
		for step := range 30 {
			switch op := r.IntN(10); {
			case op == 0:
				k := r.IntN(len(ps))
				draining[k] = !draining[k]
				if err := st.SetDraining(ps[k].ID, draining[k]); err != nil {
					t.Fatal(err)
				}
			case op <= 2:
				k := r.IntN(len(ps))
				count := r.Int64N(4)
				if _, err := st.Complete(ps[k].Index, count); err != nil {
					t.Fatal(err)
				}
				load[k] = max(load[k]-count, 0)
			default:
				var cand []int // positions in ps
				var candLoads []int64
				var candNodes []string
				for k := range ps {
					if !draining[k] {
						cand = append(cand, k)
						candLoads = append(candLoads, load[k])
						candNodes = append(candNodes, refPolicyNode(c.topo, ps[k]))
					}
				}
				req := AssignRequest{Kind: AssignLeastLoaded, NumTasks: r.IntN(2*len(ps) + 1)}
				if op >= 6 {
					req.Kind = AssignNodeAffinity
					req.EnvIDs = nil
					for range req.NumTasks {
						req.EnvIDs = append(req.EnvIDs, genEnvID(r, len(ps)+2))
					}
				}
				got, err := st.Assign(req)
				if len(cand) == 0 {
					if !errors.Is(err, ErrAllUnavailable) {
						t.Fatalf("case %d step %d: all draining: %v, %v; want ErrAllUnavailable", i, step, got.Indices, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("case %d step %d: %v", i, step, err)
				}
				var refPos []int
				if req.Kind == AssignNodeAffinity {
					refPos = refNodeAffinity(c.topo, candNodes, candLoads, req.NumTasks, req.EnvIDs)
				} else {
					refPos = refSimple(candLoads, req.NumTasks)
				}
				var want []int
				for _, p := range refPos {
					want = append(want, ps[cand[p]].Index)
					load[cand[p]]++
				}
				if !slices.Equal(got.Indices, want) {
					t.Fatalf("case %d step %d: %+v over loads %v = %v; reference %v", i, step, req, candLoads, got.Indices, want)
				}
			}
			for k, s := range st.Stats().Policies {
				if s.Load != load[k] {
					t.Fatalf("case %d step %d: policy %d load %d; reference %d", i, step, s.Policy.Index, s.Load, load[k])
				}
			}
		}
	}
}

func TestRoundRobinMatchesReference(t *testing.T) {
	r := propertyRand(t)
	for i := range propertyCases {
		c := genCase(r, true)
		st := newState(t, Options{}, c.policies, c.topo)
		ref := &refRoundRobin{topo: c.topo, n: len(c.policies), rr: map[string]int{}}
		for _, env := range c.envIDs {
			sel, err := st.Select(context.Background(), SelectRequest{Wait: time.Hour, Router: SelectRoundRobin, EnvID: env})
			if err != nil {
				t.Fatalf("case %d: Select(%q): %v", i, env, err)
			}
			if want := ref.selectPolicy(env); sel.Policy.Index != want {
				t.Fatalf("case %d: topology %v, env ids %q: Select(%q) = %d; reference %d", i, c.topo, c.envIDs, env, sel.Policy.Index, want)
			}
		}
	}
}

// TestSelectIdleMatchesModel checks SelectIdle and SelectIdleAffinity
// against a FIFO model: one deque of idle slots (policies, capacity
// counted), released slots at the back; an env on a node takes the first
// idle slot of its node, else the head.
func TestSelectIdleMatchesModel(t *testing.T) {
	r := propertyRand(t)
	for i := range propertyCases / 3 {
		c := genCase(r, false)
		if len(c.policies) == 0 {
			continue
		}
		for k := range c.policies {
			c.policies[k].Capacity = r.IntN(4) // 0 means 1
		}
		st := newState(t, Options{}, c.policies, c.topo)
		ps := slices.Clone(c.policies)
		slices.SortFunc(ps, func(a, b Policy) int { return a.Index - b.Index })
		nodeOf := map[int]string{}
		var deque []int // policy indices of idle slots
		for round := range 3 {
			for _, p := range ps {
				if round < max(p.Capacity, 1) {
					deque = append(deque, p.Index)
				}
			}
		}
		for _, p := range ps {
			nodeOf[p.Index] = refPolicyNode(c.topo, p)
		}
		type held struct {
			index int
			lease uint64
		}
		var out []held
		for step := range 40 {
			if len(out) > 0 && r.IntN(3) == 0 {
				k := r.IntN(len(out))
				h := out[k]
				out = slices.Delete(out, k, k+1)
				sel, err := st.Release(h.lease)
				if err != nil || sel.Policy.Index != h.index {
					t.Fatalf("case %d step %d: Release = %d, %v; want policy %d", i, step, sel.Policy.Index, err, h.index)
				}
				deque = append(deque, h.index)
				continue
			}
			kind, env := SelectIdle, ""
			if r.IntN(2) == 0 {
				kind, env = SelectIdleAffinity, genEnvID(r, len(ps)+2)
			}
			want := -1
			if len(deque) > 0 {
				at := 0
				if node := refEnvNode(c.topo, env); kind == SelectIdleAffinity && node != "" {
					if k := slices.IndexFunc(deque, func(idx int) bool { return nodeOf[idx] == node }); k >= 0 {
						at = k
					}
				}
				want = deque[at]
				deque = slices.Delete(deque, at, at+1)
			}
			sel, err := st.Select(cancelled(), SelectRequest{Router: kind, EnvID: env})
			switch {
			case want < 0 && !errors.Is(err, ErrNoIdlePolicy):
				t.Fatalf("case %d step %d: Select(%T, %q) = %d, %v; model has nothing idle", i, step, kind, env, sel.Policy.Index, err)
			case want >= 0 && (err != nil || sel.Policy.Index != want):
				t.Fatalf("case %d step %d: Select(%T, %q) = %d, %v; model %d", i, step, kind, env, sel.Policy.Index, err, want)
			case want >= 0:
				out = append(out, held{want, sel.Lease})
			}
		}
		if s := st.Stats(); s.Idle != len(deque) || s.Leases != len(out) {
			t.Fatalf("case %d: Stats idle %d leases %d; model %d, %d", i, s.Idle, s.Leases, len(deque), len(out))
		}
	}
}
