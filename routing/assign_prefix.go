package routing

import "github.com/policyrouter/policyrouter/prefix"

// The score stage of a tracked /assign whose tasks share one prompt
// (AssignRequest.Prefix: a GRPO group assigned in one call): the rule of
// the /select score stage (score_prefix.go), applied to the batch. The
// router spreads the tasks first, as the seed does; then the tasks no
// session homed go to targets in turn, each taking tasks while its load
// stays within PrefixLoadBound of the least loaded candidate's, so that a
// group shares its prompt's cache on as few policies as the bound allows
// instead of filling every policy's cache with it:
//
//   - a target is the candidate not yet a target that is expected to hold
//     the longest prefix of the hashes (confirmed or pending) among those
//     within the bound, ties to the lower load, then the first in the
//     fleet's order;
//   - when none of them holds any block, the router's own pick for the
//     first task left, else the least loaded candidate left.
//
// Load is what the router counts (tracked tasks and leases) over capacity,
// the least loaded candidate's taken before the batch. Tasks no target has
// room for keep the router's pick. An /assign with current_loads
// (stateless) names loads the router does not track, and is not steered.
// Without hashes nothing here runs: the answers are the seed's.

// assignPrefixLocked steers out, the router's positions in rts for each
// task, by the rule above; homed says which tasks a session homed (nil:
// none). loads are the candidates' tracked loads. It records the hashes
// pending on each policy given a task, in the same step, so that a
// concurrent /assign of the same prompt follows, and counts one decision
// per task. Caller must hold mu.
func (st *State) assignPrefixLocked(hashes []prefix.Hash, out []int, homed func(task int) bool, rts []*policyRuntime, loads []int64) {
	if len(rts) == 0 || len(out) == 0 {
		return
	}
	hashes = capHashes(hashes)
	sc := &st.prefixScratch
	sc.ids = sc.ids[:0]
	for _, rt := range rts {
		sc.ids = append(sc.ids, rt.policy.ID)
	}
	sc.matches = st.prefix.Match(hashes, sc.ids, sc.matches)
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
	least, top := frac(0), 0
	for pos := range rts {
		least = min(least, frac(pos))
		top = max(top, sc.matches[pos].Pending)
	}
	used := make([]bool, len(rts))
	for len(left) > 0 {
		target := -1
		for pos := range rts {
			if used[pos] || frac(pos)-least > PrefixLoadBound {
				continue
			}
			m := sc.matches[pos].Pending
			if target < 0 || m > sc.matches[target].Pending || (m == sc.matches[target].Pending && frac(pos) < frac(target)) {
				target = pos
			}
		}
		if target < 0 {
			break // every candidate is a target already, or past the bound
		}
		if r := out[left[0]]; sc.matches[target].Pending == 0 && !used[r] && frac(r)-least <= PrefixLoadBound {
			target = r // nobody left holds a block: the router's pick
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
	recorded := make(map[int]bool, 4)
	for _, pos := range out {
		if !recorded[pos] {
			recorded[pos] = true
			st.prefix.RecordPending(rts[pos].policy.ID, hashes)
		}
		o := PrefixMiss
		switch m := sc.matches[pos].Pending; {
		case top > 0 && m == top:
			o = PrefixHit
		case top > 0:
			o = PrefixBalanced
		}
		st.prefixN.of(o).Add(1)
		st.prefixN.matched.Add(uint64(sc.matches[pos].Confirmed))
		st.prefixN.prompt.Add(uint64(len(hashes)))
	}
}
