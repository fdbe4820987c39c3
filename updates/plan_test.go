package updates

import (
	"slices"
	"testing"
)

func TestPlanWave(t *testing.T) {
	fleet := func(nodes map[string][]int64) []member {
		var ms []member
		for node, versions := range nodes {
			for _, v := range versions {
				ms = append(ms, member{ID: node + "-" + string(rune('a'+len(ms))), Index: len(ms), Node: node, Version: v, Available: true})
			}
		}
		return ms
	}
	ids := func(ms []member) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Node)
		}
		slices.Sort(out)
		return out
	}
	for _, tt := range []struct {
		name     string
		members  []member
		room     int
		minNode  int
		wantNode []string
	}{
		{"spread over nodes", fleet(map[string][]int64{"x": {1, 1, 1}, "y": {1, 1, 1}}), 2, 0, []string{"x", "y"}},
		{"room bounds the wave", fleet(map[string][]int64{"x": {1, 1, 1}, "y": {1, 1, 1}}), 4, 0, []string{"x", "x", "y", "y"}},
		{"per-node floor", fleet(map[string][]int64{"x": {1, 1}, "y": {1}}), 3, 1, []string{"x"}},
		{"at the version already", fleet(map[string][]int64{"x": {2, 2}, "y": {1, 2}}), 4, 0, []string{"y"}},
		{"no room", fleet(map[string][]int64{"x": {1}}), 0, 0, nil},
		{"everything", fleet(map[string][]int64{"x": {1, 1}, "y": {1, 1}}), 100, 0, []string{"x", "x", "y", "y"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := ids(planWave(tt.members, 2, tt.room, tt.minNode, nil)); !slices.Equal(got, tt.wantNode) {
				t.Errorf("wave on nodes %v; want %v", got, tt.wantNode)
			}
		})
	}
	// Unavailable and skipped policies are never taken, and do not count
	// as routable for the floor.
	ms := fleet(map[string][]int64{"x": {1, 1}})
	ms[0].Available = false
	if got := planWave(ms, 2, 2, 1, nil); len(got) != 0 {
		t.Errorf("wave %v leaves node x without a routable policy", got)
	}
	if got := planWave(ms, 2, 2, 0, map[string]bool{ms[1].ID: true}); len(got) != 0 {
		t.Errorf("wave %v takes a skipped or unavailable policy", got)
	}

	// A held policy (joined during the update) gets no work: it does not
	// count as routable for the floor, taking it costs its node nothing,
	// and it goes first on its node.
	ms = fleet(map[string][]int64{"x": {1, 1}})
	ms[1].Held = true
	if got := planWave(ms, 2, 2, 1, nil); len(got) != 1 || got[0].ID != ms[1].ID {
		t.Errorf("wave %v; want the held policy alone: the other is node x's one routable policy", got)
	}
	// A node whose stale policies are all held comes after the nodes with
	// routable ones, whatever its name.
	ms = []member{
		{ID: "joiner", Index: 2, Node: "", Version: 1, Available: true, Held: true},
		{ID: "a", Index: 0, Node: "x", Version: 1, Available: true},
		{ID: "b", Index: 1, Node: "y", Version: 1, Available: true},
	}
	if got := planWave(ms, 2, 1, 0, nil); len(got) != 1 || got[0].ID != "a" {
		t.Errorf("wave %v; want policy a, of the first node with the most routable policies", got)
	}
}
