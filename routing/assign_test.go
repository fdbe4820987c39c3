package routing

import (
	"errors"
	"slices"
	"testing"
)

func TestLeastLoaded(t *testing.T) {
	tests := []struct {
		name  string
		loads []int64
		n     int
		want  []int
	}{
		{"seed example", []int64{3, 1, 2}, 5, ints(1, 1, 2, 0, 1)},
		{"all tied go in index order", []int64{0, 0, 0}, 4, ints(0, 1, 2, 0)},
		{"tie after a pick goes to the lower index", []int64{2, 2, 1, 1}, 4, ints(2, 3, 0, 1)},
		{"negative loads", []int64{-1, 0}, 3, ints(0, 0, 1)},
		{"one policy", []int64{5}, 3, ints(0, 0, 0)},
		{"far behind takes everything", []int64{100, 0}, 3, ints(1, 1, 1)},
		{"no tasks", []int64{1, 2}, 0, ints()},
		{"limits", []int64{MaxLoad, -MaxLoad}, 2, ints(1, 1)},
		{"fewer tasks than policies", []int64{5, 1, 1, 0, 9}, 3, ints(3, 1, 2)},
		{"policies join level by level", []int64{2, 0, 1}, 7, ints(1, 1, 2, 0, 1, 2, 0)},
		{"late joiner", []int64{0, 3}, 10, ints(0, 0, 0, 0, 1, 0, 1, 0, 1, 0)},
		{"gap wider than the tasks", []int64{0, 1000000}, 5, ints(0, 0, 0, 0, 0)},
		{"joiners between actives", []int64{1, 0, 1, 0}, 6, ints(1, 3, 0, 1, 2, 3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loads := slices.Clone(tt.loads)
			got, err := LeastLoaded(loads, tt.n)
			if err != nil {
				t.Fatalf("LeastLoaded(%v, %d): %v", tt.loads, tt.n, err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("LeastLoaded(%v, %d) = %v; want %v", tt.loads, tt.n, got, tt.want)
			}
			if !slices.Equal(loads, tt.loads) {
				t.Errorf("LeastLoaded modified loads: %v; was %v", loads, tt.loads)
			}
		})
	}
}

func TestLeastLoadedErrors(t *testing.T) {
	tests := []struct {
		name  string
		loads []int64
		n     int
		field string // "" for ErrNoPolicies
	}{
		{"nil loads", nil, 1, ""},
		{"empty loads", []int64{}, 1, ""},
		{"negative tasks", []int64{0}, -1, "num_tasks"},
		{"too many tasks", []int64{0}, MaxTasks + 1, "num_tasks"},
		{"load too high", []int64{0, MaxLoad + 1}, 1, "current_loads"},
		{"load too low", []int64{-MaxLoad - 1}, 1, "current_loads"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LeastLoaded(tt.loads, tt.n)
			if tt.field == "" {
				if !errors.Is(err, ErrNoPolicies) {
					t.Fatalf("LeastLoaded = %v, %v; want ErrNoPolicies", got, err)
				}
				return
			}
			wantInputError(t, err, tt.field)
		})
	}
}

func TestNodeAffinity(t *testing.T) {
	// Policies 0, 1 on node a, 2 on b, 3 on no node; env workers 0, 1 on a,
	// 2 on b, 3 on c (which has no policy).
	four := AffinityInput{
		Indices: ints(0, 1, 2, 3),
		Nodes:   []string{"a", "a", "b", ""},
		EnvNode: map[int]string{0: "a", 1: "a", 2: "b", 3: "c"},
	}
	with := func(in AffinityInput, loads []int64, envs ...string) AffinityInput {
		in.Loads = loads
		in.EnvIDs = envs
		return in
	}
	allNodes := four
	allNodes.Nodes = []string{"a", "a", "b", "b"}
	noNodes := four
	noNodes.Nodes = []string{"", "", "", ""}
	sparse := AffinityInput{
		Indices: ints(2, 5, 9),
		Nodes:   []string{"a", "b", ""},
		EnvNode: map[int]string{0: "a", 1: "b"},
	}

	tests := []struct {
		name string
		in   AffinityInput
		want []int
	}{
		{"node ties to lowest index", with(four, []int64{0, 0, 0, 0}, "env-0", "env-1", "env-0"), ints(0, 1, 0)},
		{"least loaded on the node", with(four, []int64{5, 2, 0, 0}, "env-0", "env-0", "env-0", "env-0"), ints(1, 1, 1, 0)},
		{"other node", with(four, []int64{0, 0, 9, 0}, "env-2", "env-2"), ints(2, 2)},
		{"node without policies falls back to all", with(four, []int64{3, 1, 2, 4}, "env-3", "env-3", "env-3"), ints(1, 1, 2)},
		{"fallback counts node picks", with(four, []int64{1, 1, 1, 1}, "env-0", "env-3"), ints(0, 1)},
		// The seed's quirk: an env with no node (unknown id, or a worker on
		// no node) matches the policies that have no node, however loaded.
		{"unknown env ids go to node-less policies", with(four, []int64{0, 0, 0, 5}, "env", "env-x", "env-", "env-9"), ints(3, 3, 3, 3)},
		{"unknown env with every policy on a node", with(allNodes, []int64{2, 1, 0, 0}, "env-x", "env-x", "env-x"), ints(2, 3, 1)},
		{"no policy on a node is least loaded", with(noNodes, []int64{1, 0, 1, 1}, "env-0", "env-2", "env-x"), ints(1, 0, 1)},
		{"answers are indices", with(sparse, []int64{0, 0, 0}, "env-1", "env-0", "env-7", "env-1"), ints(5, 2, 9, 5)},
		{"no env ids", with(four, []int64{0, 0, 0, 0}), ints()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loads := slices.Clone(tt.in.Loads)
			got, err := NodeAffinity(tt.in)
			if err != nil {
				t.Fatalf("NodeAffinity: %v", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("NodeAffinity(loads %v, env ids %q) = %v; want %v", tt.in.Loads, tt.in.EnvIDs, got, tt.want)
			}
			if !slices.Equal(loads, tt.in.Loads) {
				t.Errorf("NodeAffinity modified loads")
			}
		})
	}
}

func TestNodeAffinityErrors(t *testing.T) {
	base := AffinityInput{Indices: ints(0, 1), Loads: []int64{0, 0}, Nodes: []string{"a", "b"}, EnvIDs: []string{"env-0"}}
	tests := []struct {
		name   string
		modify func(*AffinityInput)
		field  string // "" for ErrNoPolicies
	}{
		{"loads shorter", func(in *AffinityInput) { in.Loads = in.Loads[:1] }, "current_loads"},
		{"nodes shorter", func(in *AffinityInput) { in.Nodes = in.Nodes[:1] }, "current_loads"},
		{"no candidates", func(in *AffinityInput) { in.Indices, in.Loads, in.Nodes = nil, nil, nil }, ""},
		{"load out of range", func(in *AffinityInput) { in.Loads = []int64{0, MaxLoad + 1} }, "current_loads"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base
			tt.modify(&in)
			got, err := NodeAffinity(in)
			if tt.field == "" {
				if !errors.Is(err, ErrNoPolicies) {
					t.Fatalf("NodeAffinity = %v, %v; want ErrNoPolicies", got, err)
				}
				return
			}
			wantInputError(t, err, tt.field)
		})
	}
}

func TestAssignStateless(t *testing.T) {
	seedTopo := nodes(map[string][2][]int{"n0": {ints(0, 1), ints(0, 1)}, "n1": {ints(2), ints(2)}})
	// Only 0 and 1 registered (on n0); indices 2 and 3 of the loads are not.
	partTopo := nodes(map[string][2][]int{"n0": {ints(0), ints(0, 1)}})
	tests := []struct {
		name     string
		policies []Policy
		topo     Topology
		req      AssignRequest
		want     []int
	}{
		{
			name:     "seed node affinity example",
			policies: densePolicies(3), topo: seedTopo,
			req:  AssignRequest{Kind: AssignNodeAffinity, NumTasks: 3, Loads: []int64{0, 0, 0}, EnvIDs: []string{"env-0", "env-2", "env-x"}},
			want: ints(0, 2, 1),
		},
		{
			name:     "seed simple example",
			policies: densePolicies(3), topo: seedTopo,
			req:  AssignRequest{Kind: AssignLeastLoaded, NumTasks: 5, Loads: []int64{3, 1, 2}},
			want: ints(1, 1, 2, 0, 1),
		},
		{
			name:     "least loaded ignores env ids",
			policies: densePolicies(3), topo: seedTopo,
			req:  AssignRequest{Kind: AssignLeastLoaded, NumTasks: 2, Loads: []int64{1, 1, 0}, EnvIDs: []string{"env-0", "env-0"}},
			want: ints(2, 0),
		},
		{
			name:     "node affinity without env ids is least loaded",
			policies: densePolicies(3), topo: seedTopo,
			req:  AssignRequest{Kind: AssignNodeAffinity, NumTasks: 4, Loads: []int64{1, 0, 0}},
			want: ints(1, 2, 0, 1),
		},
		{
			name:     "unregistered indices are node-less policies",
			policies: densePolicies(2), topo: partTopo,
			req:  AssignRequest{Kind: AssignNodeAffinity, NumTasks: 3, Loads: []int64{0, 0, 5, 3}, EnvIDs: []string{"env-x", "env-0", "env-x"}},
			want: ints(3, 0, 3),
		},
		{
			name:     "no registration at all",
			policies: nil, topo: Topology{},
			req:  AssignRequest{Kind: AssignNodeAffinity, NumTasks: 3, Loads: []int64{2, 0, 1}, EnvIDs: []string{"env-0", "env-1", "env-2"}},
			want: ints(1, 1, 2),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newState(t, Options{}, tt.policies, tt.topo)
			loads := slices.Clone(tt.req.Loads)
			got, err := st.Assign(tt.req)
			if err != nil {
				t.Fatalf("Assign: %v", err)
			}
			if !slices.Equal(got.Indices, tt.want) {
				t.Errorf("Assign = %v; want %v", got.Indices, tt.want)
			}
			if got.Snapshot != st.Snapshot() {
				t.Errorf("Assign answered with another snapshot than the current one")
			}
			if !slices.Equal(loads, tt.req.Loads) {
				t.Errorf("Assign modified the caller's loads")
			}
			for _, ps := range st.Stats().Policies {
				if ps.Load != 0 || ps.Assigned != 0 {
					t.Errorf("stateless Assign changed policy %d: load %d, assigned %d", ps.Policy.Index, ps.Load, ps.Assigned)
				}
			}
		})
	}
}

func TestAssignErrors(t *testing.T) {
	topo := nodes(map[string][2][]int{"n0": {ints(0), ints(0, 1)}})
	tests := []struct {
		name     string
		policies []Policy
		drain    []string
		req      AssignRequest
		field    string // "" for ErrNoPolicies, "-" for any error
	}{
		{
			name: "env ids longer than num_tasks", policies: densePolicies(2),
			req:   AssignRequest{Kind: AssignNodeAffinity, NumTasks: 1, Loads: []int64{0, 0}, EnvIDs: []string{"env-0", "env-1"}},
			field: "env_ids",
		},
		{
			name: "env ids shorter than num_tasks", policies: densePolicies(2),
			req:   AssignRequest{Kind: AssignNodeAffinity, NumTasks: 3, EnvIDs: []string{"env-0"}},
			field: "env_ids",
		},
		{
			name: "empty env ids for tasks", policies: densePolicies(2),
			req:   AssignRequest{Kind: AssignLeastLoaded, NumTasks: 1, EnvIDs: []string{}},
			field: "env_ids",
		},
		{
			name: "empty loads", policies: densePolicies(2),
			req: AssignRequest{Kind: AssignLeastLoaded, NumTasks: 1, Loads: []int64{}},
		},
		{
			name: "empty loads with env ids", policies: densePolicies(2),
			req: AssignRequest{Kind: AssignNodeAffinity, NumTasks: 1, Loads: []int64{}, EnvIDs: []string{"env-0"}},
		},
		{
			name: "tracked with no policies",
			req:  AssignRequest{Kind: AssignLeastLoaded, NumTasks: 1},
		},
		{
			name: "tracked node affinity with no policies",
			req:  AssignRequest{Kind: AssignNodeAffinity, NumTasks: 1, EnvIDs: []string{"env-0"}},
		},
		{
			name: "tracked with every policy draining", policies: densePolicies(2), drain: []string{"p0", "p1"},
			req: AssignRequest{Kind: AssignLeastLoaded, NumTasks: 1}, field: "unavailable",
		},
		{
			name: "stateless with every registered index draining", policies: densePolicies(2), drain: []string{"p0", "p1"},
			req: AssignRequest{Kind: AssignLeastLoaded, NumTasks: 1, Loads: []int64{0, 0}}, field: "unavailable",
		},
		{
			name: "negative num_tasks", policies: densePolicies(2),
			req:   AssignRequest{Kind: AssignLeastLoaded, NumTasks: -1},
			field: "num_tasks",
		},
		{
			name: "load out of range", policies: densePolicies(2),
			req:   AssignRequest{Kind: AssignLeastLoaded, NumTasks: 1, Loads: []int64{-MaxLoad - 1}},
			field: "current_loads",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp := topo
			if tt.policies == nil {
				tp = Topology{}
			}
			st := newState(t, Options{}, tt.policies, tp)
			for _, id := range tt.drain {
				if err := st.SetDraining(id, true); err != nil {
					t.Fatal(err)
				}
			}
			got, err := st.Assign(tt.req)
			switch tt.field {
			case "":
				if !errors.Is(err, ErrNoPolicies) {
					t.Fatalf("Assign = %v, %v; want ErrNoPolicies", got.Indices, err)
				}
			case "unavailable":
				if !errors.Is(err, ErrAllUnavailable) {
					t.Fatalf("Assign = %v, %v; want ErrAllUnavailable", got.Indices, err)
				}
			case "-":
				if err == nil {
					t.Fatalf("Assign = %v; want an error", got.Indices)
				}
			default:
				wantInputError(t, err, tt.field)
			}
			for _, ps := range st.Stats().Policies {
				if ps.Load != 0 {
					t.Errorf("failed Assign left policy %d with load %d", ps.Policy.Index, ps.Load)
				}
			}
		})
	}
}

func TestAssignTracked(t *testing.T) {
	topo := nodes(map[string][2][]int{"a": {ints(0), ints(0, 1)}, "b": {ints(1), ints(2)}})
	st := newState(t, Options{}, densePolicies(3), topo)
	loads := func() []int64 {
		var out []int64
		for _, ps := range st.Stats().Policies {
			out = append(out, ps.Load)
		}
		return out
	}
	steps := []struct {
		name      string
		do        func() ([]int, error)
		want      []int // nil: not an assignment
		wantLoads []int64
	}{
		{"least loaded", func() ([]int, error) { return assignIdx(st, AssignRequest{Kind: AssignLeastLoaded, NumTasks: 4}) }, ints(0, 1, 2, 0), []int64{2, 1, 1}},
		{"least loaded continues", func() ([]int, error) { return assignIdx(st, AssignRequest{Kind: AssignLeastLoaded, NumTasks: 2}) }, ints(1, 2), []int64{2, 2, 2}},
		{"complete", func() ([]int, error) { return nil, complete(t, st, 0, 2, 0) }, nil, []int64{0, 2, 2}},
		{"complete below zero", func() ([]int, error) { return nil, complete(t, st, 1, 5, 0) }, nil, []int64{0, 0, 2}},
		{"node affinity", func() ([]int, error) {
			return assignIdx(st, AssignRequest{Kind: AssignNodeAffinity, NumTasks: 4, EnvIDs: []string{"env-1", "env-1", "env-0", "env-0"}})
		}, ints(2, 2, 0, 1), []int64{1, 1, 4}},
		{"probe load replaces the estimate", func() ([]int, error) {
			st.ObserveProbe("p2", Probe{OK: true, Load: 0, HasLoad: true})
			return nil, nil
		}, nil, []int64{1, 1, 0}},
		{"negative probe load counts as zero", func() ([]int, error) {
			st.ObserveProbe("p1", Probe{OK: true, Load: -4, HasLoad: true})
			return nil, nil
		}, nil, []int64{1, 0, 0}},
		{"after probes", func() ([]int, error) { return assignIdx(st, AssignRequest{Kind: AssignLeastLoaded, NumTasks: 3}) }, ints(1, 2, 0), []int64{2, 1, 1}},
	}
	for _, step := range steps {
		got, err := step.do()
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if step.want != nil && !slices.Equal(got, step.want) {
			t.Errorf("%s: assignment = %v; want %v", step.name, got, step.want)
		}
		if gl := loads(); !slices.Equal(gl, step.wantLoads) {
			t.Errorf("%s: loads = %v; want %v", step.name, gl, step.wantLoads)
		}
	}
	var assigned []uint64
	for _, ps := range st.Stats().Policies {
		assigned = append(assigned, ps.Assigned)
	}
	if want := []uint64{4, 4, 5}; !slices.Equal(assigned, want) {
		t.Errorf("assigned totals = %v; want %v", assigned, want)
	}
	if _, err := st.Complete(9, 1); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("Complete(unknown index) = %v; want ErrUnknownPolicy", err)
	}
}

func assignIdx(st *State, req AssignRequest) ([]int, error) {
	a, err := st.Assign(req)
	return a.Indices, err
}

// complete calls Complete and checks the load it reports.
func complete(tb testing.TB, st *State, index int, count, wantLoad int64) error {
	tb.Helper()
	got, err := st.Complete(index, count)
	if err == nil && got != wantLoad {
		tb.Errorf("Complete(%d, %d) = %d; want load %d", index, count, got, wantLoad)
	}
	return err
}
