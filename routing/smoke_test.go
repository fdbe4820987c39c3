package routing

import (
	"context"
	"testing"
)

func TestSmoke(t *testing.T) {
	got, err := LeastLoaded([]int64{3, 1, 2}, 5)
	t.Log(got, err)
	st := New(Options{})
	topo := Topology{Nodes: map[string]Components{"n0": {Env: []int{0, 1}, Eval: []int{0, 1}}, "n1": {Env: []int{2}, Eval: []int{2}}}}
	ps := []Policy{{Index: 0, ID: "p0"}, {Index: 1, ID: "p1"}, {Index: 2, ID: "p2"}}
	if err := st.Update(ps, topo); err != nil {
		t.Fatal(err)
	}
	a, err := st.Assign(AssignRequest{Kind: AssignNodeAffinity, NumTasks: 3, Loads: []int64{0, 0, 0}, EnvIDs: []string{"env-0", "env-2", "env-x"}})
	t.Log(a.Indices, err)
	var seq []int
	for _, e := range []string{"env-0", "env-1", "env-2", "env-9", "env-0"} {
		s, err := st.Select(context.Background(), SelectRoundRobin, e)
		if err != nil {
			t.Fatal(err)
		}
		seq = append(seq, s.Policy.Index)
	}
	t.Log(seq)
	for range 3 {
		s, err := st.Select(context.Background(), SelectIdle, "")
		t.Log(s, err)
	}
	t.Log(st.Stats())
}
