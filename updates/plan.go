package updates

import (
	"cmp"
	"slices"
)

// member is a registered policy as the planner sees it.
type member struct {
	ID        string
	Index     int
	Node      string
	Version   int64
	Engine    string
	Available bool // routable now: healthy, not draining, heard from
	Held      bool // joined during the update: no work until at its version
}

// planWave picks the next wave: at most room policies below version that
// are routable and not in skip, spread over the nodes (one per node in
// turn, the node with the most routable policies first), never leaving a
// node with fewer than minPerNode routable policies. Policies are taken in
// index order within a node, held ones first: a policy routing holds
// (it joined during the update) gets no work, so it does not count as
// routable and taking it leaves its node as it was.
func planWave(members []member, version int64, room, minPerNode int, skip map[string]bool) []member {
	routable := map[string]int{}
	stale := map[string][]member{}
	for _, m := range members {
		if !m.Available {
			continue
		}
		if !m.Held {
			routable[m.Node]++
		}
		if m.Version < version && !skip[m.ID] {
			stale[m.Node] = append(stale[m.Node], m)
		}
	}
	nodes := make([]string, 0, len(stale))
	for n, ms := range stale {
		slices.SortFunc(ms, func(a, b member) int {
			if a.Held != b.Held {
				if a.Held {
					return -1
				}
				return 1
			}
			return cmp.Compare(a.Index, b.Index)
		})
		nodes = append(nodes, n)
	}
	var wave []member
	for len(wave) < room {
		// The node with the most routable policies left, ties by name.
		slices.SortFunc(nodes, func(a, b string) int {
			if c := cmp.Compare(routable[b], routable[a]); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		took := false
		for _, n := range nodes {
			if len(stale[n]) == 0 {
				continue
			}
			next := stale[n][0]
			if !next.Held && routable[n]-1 < minPerNode {
				continue
			}
			wave = append(wave, next)
			stale[n] = stale[n][1:]
			if !next.Held {
				routable[n]--
			}
			took = true
			break
		}
		if !took {
			break
		}
	}
	return wave
}
