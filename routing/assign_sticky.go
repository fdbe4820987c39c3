package routing

import (
	"slices"
	"strconv"
)

// assignSessions answers req over the candidates in, as positions in in,
// and says per task where the sticky stage sent it (nil without session
// keys). Without session keys it is the router's answer alone, exactly as
// before. With them, the sticky stage first homes the tasks that name a
// session. The tasks that name one key form a group (a GRPO group of
// samples of one prompt), taken in the order keys first appear: the group
// lands as a unit on its home among the candidates (the env worker's
// node's ring first for an env-affine router), the first successor on the
// ring whose load, raised by the groups homed before it, is below
// ⌈c · (total + 1) / available⌉, checked once for the group, so its shared
// prefix is computed once. A home whose capacity cannot take the whole
// group takes as many tasks as its capacity, and the next successor under
// the bound the next ones. The router then spreads the other tasks (no
// session, or no candidate can be a home) over the loads the sticky tasks
// left. A candidate's load for the bound is its load in in plus, in
// tracked mode, leases(position) (its /select leases out); the router sees
// the loads in in alone, as without sessions. In stateless mode (leases
// nil) only registered policies are on the rings: an index of
// current_loads with no registration is never a home.
func (st *State) assignSessions(snap *Snapshot, req AssignRequest, in AffinityInput, leases func(pos int) int64) ([]int, []Sticky, error) {
	if !slices.ContainsFunc(req.Sessions, func(k string) bool { return k != "" }) {
		out, err := st.assignOver(snap, req, in)
		return out, nil, err
	}
	if err := checkAssignInput(in.Loads, req.NumTasks); err != nil {
		return nil, nil, err
	}
	for i, k := range req.Sessions {
		if err := CheckSession("session_ids["+strconv.Itoa(i)+"]", k); err != nil {
			return nil, nil, err
		}
	}
	cand := make([]int, len(snap.policies)) // snapshot position -> position in in
	for p := range cand {
		cand[p] = -1
	}
	for k, idx := range in.Indices {
		if p, ok := snap.posOf[idx]; ok {
			cand[p] = k
		}
	}
	loads := slices.Clone(in.Loads) // the router's, raised by homed tasks
	held := make([]int64, len(loads))
	if leases != nil {
		for k := range held {
			held[k] = leases(k)
		}
	}
	avail := func(p int) bool { return cand[p] >= 0 }
	load := func(p int) int64 { return loads[cand[p]] + held[cand[p]] }

	// The bound's total and available count per ring, kept up to date as
	// tasks are homed.
	type agg struct {
		total int64
		n     int
	}
	aggs := make(map[*hashRing]*agg)
	aggOf := func(r *hashRing) *agg {
		a := aggs[r]
		if a == nil {
			a = &agg{}
			for _, p := range r.members() {
				if avail(p) {
					a.total += load(p)
					a.n++
				}
			}
			aggs[r] = a
		}
		return a
	}
	c := st.loadFactor(req.LoadFactor)

	kind := req.Kind
	if kind == nil {
		kind = AssignLeastLoaded
	}
	affine := envAffine(nil, kind)
	rs := snap.rings()
	out := make([]int, req.NumTasks)
	outcome := make([]Sticky, req.NumTasks)
	var rest []int // tasks left to the router
	var hits, misses, spills uint64
	for _, g := range sessionGroups(req.Sessions) {
		if g.key == "" {
			rest = append(rest, g.tasks...)
			continue
		}
		envNode := ""
		if affine && req.EnvIDs != nil {
			envNode = snap.EnvNode(req.EnvIDs[g.tasks[0]])
		}
		h := sessionHash(g.key)
		// The group lands on its home as a unit, the bound checked once
		// for the group; a home whose capacity cannot take it all takes
		// what it can and the next successor the rest.
		var used []int
		tasks := g.tasks
		for len(tasks) > 0 {
			free := func(p int) bool { return avail(p) && !slices.Contains(used, p) }
			p, natural, _ := snap.home(h, envNode, affine, func(r *hashRing, p int) bool {
				a := aggOf(r) // a ring a policy is on has a.n > 0 once it is free
				return free(p) && load(p) < loadBound(c, a.total, max(a.n, 1))
			})
			if p < 0 {
				break
			}
			used = append(used, p)
			take := min(len(tasks), snap.policies[p].capacity())
			o := StickyMoved
			if natural && len(used) == 1 {
				o, hits = StickyHome, hits+uint64(take)
			} else {
				misses += uint64(take)
			}
			for _, i := range tasks[:take] {
				out[i], outcome[i] = cand[p], o
			}
			tasks = tasks[take:]
			loads[cand[p]] += int64(take)
			for _, r := range [...]*hashRing{rs.all, rs.byNode[snap.nodes[p]]} {
				if a := aggs[r]; r != nil && a != nil {
					a.total += int64(take)
				}
			}
		}
		for _, i := range tasks {
			outcome[i] = StickySpilled
		}
		spills += uint64(len(tasks))
		rest = append(rest, tasks...)
	}
	slices.Sort(rest) // the router takes the tasks in task order
	if len(rest) > 0 {
		sub := req
		sub.NumTasks = len(rest)
		sub.Sessions = nil
		if req.EnvIDs != nil {
			sub.EnvIDs = make([]string, len(rest))
			for j, i := range rest {
				sub.EnvIDs[j] = req.EnvIDs[i]
			}
		}
		rin := in
		rin.Loads = loads
		for k, l := range loads {
			loads[k] = min(l, MaxLoad) // the router's limit; only absurd loads reach it
		}
		got, err := st.assignOver(snap, sub, rin)
		if err != nil {
			return nil, nil, err
		}
		for j, i := range rest {
			out[i] = got[j]
		}
	}
	st.sticky.hits.Add(hits)
	st.sticky.misses.Add(misses)
	st.sticky.spills.Add(spills)
	return out, outcome, nil
}

// sessionGroup is the tasks of one /assign that name one session key, in
// task order; the tasks that name none form the group of key "".
type sessionGroup struct {
	key   string
	tasks []int
}

// sessionGroups groups tasks by session key, in the order each key first
// appears.
func sessionGroups(keys []string) []sessionGroup {
	at := make(map[string]int, len(keys))
	var gs []sessionGroup
	for i, k := range keys {
		g, ok := at[k]
		if !ok {
			g = len(gs)
			at[k] = g
			gs = append(gs, sessionGroup{key: k})
		}
		gs[g].tasks = append(gs[g].tasks, i)
	}
	return gs
}
