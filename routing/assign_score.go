package routing

import "github.com/policyrouter/policyrouter/prefix"

// The score stage of a tracked /assign (filter.go): the rule of the
// /select score stage (score_prefix.go), applied to the batch. The router
// spreads the tasks first, as the seed does; then, when a candidate is
// rated (by the blocks it holds of the prompt the tasks share,
// AssignRequest.Prefix: a GRPO group assigned in one call; or by a
// scorer), the tasks no session homed go to targets in turn, each taking
// tasks while its load stays within PrefixLoadBound of the least loaded
// candidate's, so that a group shares its prompt's cache on as few
// policies as the bound allows instead of filling every policy's cache
// with it:
//
//   - a target is the candidate not yet a target with the highest rating
//     among those within the bound, ties to the lower load, then the first
//     in the fleet's order;
//   - when none of them is rated, for a request with hashes the router's
//     own pick for the first task left, else the least loaded candidate
//     left; without hashes the rest keep the router's pick.
//
// Load is what the router counts (tracked tasks and leases) over capacity,
// the least loaded candidate's taken before the batch. Tasks no target has
// room for keep the router's pick. An /assign with current_loads
// (stateless) names loads the router does not track, and is not steered.
// Where nothing is rated the answers are the seed's.

// assignScoreLocked steers out, the router's positions in rts for each
// task of a request with q and hashes, by the rule above; homed says which
// tasks a session homed (nil: none). loads are the candidates' tracked
// loads. With hashes it records them pending on each policy given a task,
// in the same step, so that a concurrent /assign of the same prompt
// follows, and counts one decision per task. Caller must hold mu.
func (st *State) assignScoreLocked(q *Query, hashes []prefix.Hash, out []int, homed func(task int) bool, rts []*policyRuntime, loads []int64) {
	if len(rts) == 0 || len(out) == 0 {
		return
	}
	hashes = capHashes(hashes)
	sc := &st.prefixScratch
	sc.ids, sc.rates, sc.matches = sc.ids[:0], sc.rates[:0], sc.matches[:0]
	for _, rt := range rts {
		sc.ids = append(sc.ids, rt.policy.ID)
	}
	if len(hashes) > 0 {
		sc.matches = st.prefix.Match(hashes, sc.ids, sc.matches)
	}
	rated := false
	for pos, rt := range rts {
		rate := rateLocked(q, rt)
		if len(hashes) > 0 {
			rate += sc.matches[pos].Pending
		}
		sc.rates = append(sc.rates, rate)
		rated = rated || rate > 0
	}
	if !rated && len(hashes) == 0 {
		return // nothing rated: the seed's answer
	}
	taken := make([]int64, len(rts)) // the batch's tasks placed on each
	var left []int                   // tasks to place, in order
	for task, pos := range out {
		if homed != nil && homed(task) {
			taken[pos]++
		} else {
			left = append(left, task)
		}
	}
	frac := func(pos int) float64 {
		c := len(rts[pos].slots)
		if c <= 0 {
			return 1
		}
		return float64(loads[pos]+int64(rts[pos].inflight)+taken[pos]) / float64(c)
	}
	least := frac(0)
	for pos := range rts {
		least = min(least, frac(pos))
	}
	used := make([]bool, len(rts))
	for len(left) > 0 {
		target := -1
		for pos := range rts {
			if used[pos] || frac(pos)-least > PrefixLoadBound {
				continue
			}
			m := sc.rates[pos]
			if target < 0 || m > sc.rates[target] || (m == sc.rates[target] && frac(pos) < frac(target)) {
				target = pos
			}
		}
		if target < 0 {
			break // every candidate is a target already, or past the bound
		}
		if sc.rates[target] == 0 {
			r := out[left[0]]
			if len(hashes) == 0 {
				break // nobody left is rated: the router's picks stand
			}
			if !used[r] && frac(r)-least <= PrefixLoadBound {
				target = r // nobody left holds a block: the router's pick
			}
		}
		used[target] = true
		for len(left) > 0 {
			taken[target]++
			if frac(target)-least > PrefixLoadBound {
				taken[target]--
				break
			}
			out[left[0]], left = target, left[1:]
		}
	}
	if len(hashes) > 0 {
		st.notePrefixAssignLocked(hashes, out, rts)
	}
}

// notePrefixAssignLocked records hashes pending on each policy an /assign
// gave a task and counts one decision per task. Caller must hold mu.
func (st *State) notePrefixAssignLocked(hashes []prefix.Hash, out []int, rts []*policyRuntime) {
	top := 0
	for _, m := range st.prefixScratch.matches {
		top = max(top, m.Pending)
	}
	recorded := make(map[int]bool, 4)
	for _, pos := range out {
		if !recorded[pos] {
			recorded[pos] = true
			st.prefix.RecordPending(rts[pos].policy.ID, hashes)
		}
		m := st.prefixScratch.matches[pos]
		st.countPrefix(prefixOutcome(m.Pending, top), m.Confirmed, len(hashes))
	}
}
