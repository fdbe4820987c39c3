package routing

import (
	"slices"
	"strconv"
)

// assignSessions answers req over the candidates in, as positions in in.
// Without session keys it is the router's answer alone, exactly as
// before. With them, the sticky stage first homes the tasks that name a
// session, in task order: each goes to its session's home among the
// candidates (the env worker's node's ring first for an env-affine
// router), the first successor on the ring whose load, raised by the tasks
// homed before it, is below ⌈c · (total + 1) / available⌉. So one hot
// session fills its home up to the bound and then spreads along the ring
// instead of piling onto one policy. The router then spreads the other
// tasks (no session, or no candidate can be a home) over the loads the
// sticky tasks left. A candidate's load for the bound is its load in in
// plus, in tracked mode, leases(position) (its /select leases out); the
// router sees the loads in in alone, as without sessions. In stateless
// mode (leases nil) only registered policies are on the rings: an index of
// current_loads with no registration is never a home.
func (st *State) assignSessions(snap *Snapshot, req AssignRequest, in AffinityInput, leases func(pos int) int64) ([]int, error) {
	if !slices.ContainsFunc(req.Sessions, func(k string) bool { return k != "" }) {
		return st.assignOver(snap, req, in)
	}
	if err := checkAssignInput(in.Loads, req.NumTasks); err != nil {
		return nil, err
	}
	for i, k := range req.Sessions {
		if err := CheckSession("session_ids["+strconv.Itoa(i)+"]", k); err != nil {
			return nil, err
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
	homeOn := func(r *hashRing, h uint64) (int, bool) {
		if r == nil {
			return -1, false
		}
		a := aggOf(r)
		if a.n == 0 {
			return -1, false
		}
		return r.homeUnder(h, loadBound(st.loadFactor(req.LoadFactor), a.total, a.n), avail, load)
	}

	kind := req.Kind
	if kind == nil {
		kind = AssignLeastLoaded
	}
	affine := envAffine(nil, kind)
	rs := snap.rings()
	out := make([]int, req.NumTasks)
	var rest []int // tasks left to the router
	var hits, misses uint64
	for i, key := range req.Sessions {
		if key == "" {
			rest = append(rest, i)
			continue
		}
		envNode := ""
		if affine && req.EnvIDs != nil {
			envNode = snap.EnvNode(req.EnvIDs[i])
		}
		h := sessionHash(key)
		first, fallback := snap.ringsFor(envNode, affine)
		p, natural := homeOn(first, h)
		if p < 0 {
			p, _ = homeOn(fallback, h)
			natural = false
		}
		if p < 0 {
			misses++
			rest = append(rest, i)
			continue
		}
		if natural {
			hits++
		} else {
			misses++
		}
		out[i] = cand[p]
		loads[cand[p]]++
		for _, r := range [...]*hashRing{rs.all, rs.byNode[snap.nodes[p]]} {
			if a := aggs[r]; r != nil && a != nil {
				a.total++
			}
		}
	}
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
			return nil, err
		}
		for j, i := range rest {
			out[i] = got[j]
		}
	}
	st.sticky.hits.Add(hits)
	st.sticky.misses.Add(misses)
	return out, nil
}
