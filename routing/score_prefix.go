package routing

import (
	"sync/atomic"

	"github.com/policyrouter/policyrouter/prefix"
)

// The score stage of a decision (filters → prefer → score → pick): a
// request that carries its prompt's block hashes (SelectRequest.
// PrefixHashes) goes where the prompt is already cached, within a load
// bound. It reads the candidates through the same read-only view as the
// filters and routers (View.EachIdle: available, passing the filters, with
// room), and the State's prefix.Index for what each holds.
//
// The rule is SGLang Model Gateway's cache_aware policy
// (sgl-model-gateway/src/policies/cache_aware.rs, sgl-project/sglang
// commit 053b63ff26df927535ada92bf15967f27637787a: "find the worker with
// the highest prefix match" while the system is balanced, "route new
// requests to the least busy worker when the system is detected to be
// imbalanced", imbalanced when max - min load > balance_abs_threshold and
// max > balance_rel_threshold · min), with load measured as a fraction of
// each policy's capacity and judged per candidate rather than over the
// whole fleet:
//
//   - A candidate's match is the blocks of the chain the Index expects it
//     to hold from the start, confirmed or pending (pending blocks, sent
//     but not yet answered, attract: samples 2..n of a GRPO group follow
//     the first while it has room). Its load is occupancy / capacity.
//   - A candidate is within the bound when its load exceeds the least
//     loaded candidate's by at most PrefixLoadBound. The pipeline offers
//     only candidates with room, so a prefix is never worth queueing
//     behind a full policy while another has room.
//   - Among the candidates within the bound, the longest match wins; ties
//     go to the lower load, then to the lower index. When it is the
//     longest match of all candidates the outcome is PrefixHit; when a
//     longer one was past the bound, PrefixBalanced (and when nobody
//     within the bound matches at all, that is the least loaded
//     candidate, SGLang's shortest queue).
//   - When no candidate holds any block (PrefixMiss), the router's own
//     pick decides when it is among the least loaded candidates, else the
//     least loaded candidate (the first in the view's order): a prompt
//     that starts a group or a conversation lands where its followers
//     will find room. (The idle deque's oldest slot, idle_affinity's pick,
//     is often on a policy that already took the starts of other groups,
//     which then cannot all stay together there.)
//
// SGLang's cache_threshold (below a match rate of 0.3, the worker with
// the smallest tree) is not taken: any confirmed or pending block
// attracts, because a block is 16 tokens and a short shared prefix is
// rarely a coincidence. A request without hashes never reaches the stage:
// its decision, and the seed routers' answers, are exactly as before.
//
// A session key keeps its meaning: the prefer stage gives the session its
// home first, and the score stage ranks only what is left when the home
// cannot serve. A freed slot goes to the waiters in arrival order, but
// that a younger waiter whose prompt the slot's policy holds may go ahead
// of the longest one a bounded number of times (waiterForLocked), so
// nothing starves; a waiter handed a policy has its hashes recorded there
// and its match reported. Every decision with hashes records them as pending on the
// chosen policy (prefix.Index.RecordPending); the lease's end confirms or
// drops them (PrefixRelease).
//
// The unit of the counts (matched and prompt tokens) is BlockTokens = 16
// a block, exact for token ids; the proxy's text prompts, hashed in blocks
// of bytes, are counted in the same blocks × 16 for now.

// PrefixLoadBound is the most a candidate's load (occupancy / capacity)
// may exceed the least loaded candidate's for its cached prefix to count:
// half a policy's capacity. A GRPO group of 8 on policies of capacity 16
// stays together while the others are idle; a hot prefix on every request
// spreads once its holders run half their capacity above the rest.
const PrefixLoadBound = 0.5

// Prefix outcomes of a decision (Decision.PrefixOutcome).
const (
	// PrefixHit: the chosen policy holds the longest match of the
	// candidates.
	PrefixHit = "hit"
	// PrefixMiss: no candidate holds any block of the prompt.
	PrefixMiss = "miss"
	// PrefixBalanced: a longer match existed, and the load bound (or the
	// session's home, or the hand-off to waiters in arrival order) sent
	// the request elsewhere.
	PrefixBalanced = "balanced"
	// PrefixNone: the request carried no hashes (affinity off).
	PrefixNone = "none"
)

// PrefixOutcomes lists the outcomes, in a fixed order: the values of the
// metrics' outcome label.
var PrefixOutcomes = []string{PrefixHit, PrefixMiss, PrefixBalanced, PrefixNone}

// prefixCounters count the decisions by outcome and the blocks matched and
// sent.
type prefixCounters struct {
	hit, miss, balanced, none atomic.Uint64
	matched, prompt           atomic.Uint64 // blocks
}

func (c *prefixCounters) of(outcome string) *atomic.Uint64 {
	switch outcome {
	case PrefixHit:
		return &c.hit
	case PrefixMiss:
		return &c.miss
	case PrefixBalanced:
		return &c.balanced
	}
	return &c.none
}

// prefixScratch is the score stage's reusable memory. Guarded by State.mu.
type prefixScratch struct {
	idle    []Idle
	ids     []string
	matches []prefix.Match
	rates   []int
}

// capHashes is hashes used up to prefix.MaxBlocks: a longer list is never
// refused.
func capHashes(hashes []prefix.Hash) []prefix.Hash {
	if len(hashes) > prefix.MaxBlocks {
		return hashes[:prefix.MaxBlocks]
	}
	return hashes
}

// loadFraction is a candidate's occupancy over its capacity.
func loadFraction(c Candidate) float64 {
	n := c.Capacity()
	if n <= 0 {
		return 1
	}
	return float64(c.Occupancy()) / float64(n)
}

// scoreLocked is the score stage followed by the pick: it chooses among
// v's idle candidates by the rule above, rating each by the blocks of
// hashes it is expected to hold (none without hashes) plus the scorers'
// ratings (filter.go), or leaves the choice to router r. It returns the
// choice, the prefix outcome and the chosen policy's confirmed match
// (blocks). Caller must hold mu.
func (st *State) scoreLocked(r Selector, v View, hashes []prefix.Hash) (c Choice, ok bool, outcome string, confirmed int) {
	sc := &st.prefixScratch
	sc.idle, sc.ids, sc.rates = sc.idle[:0], sc.ids[:0], sc.rates[:0]
	v.EachIdle(func(i Idle) bool {
		sc.idle = append(sc.idle, i)
		sc.ids = append(sc.ids, i.Policy().ID)
		return true
	})
	if len(sc.idle) == 0 {
		c, ok = r.pick(v)
		return c, ok, PrefixMiss, 0
	}
	sc.matches = sc.matches[:0]
	if len(hashes) > 0 {
		sc.matches = st.prefix.Match(hashes, sc.ids, sc.matches)
	}
	least, top, prefixTop := 2.0, 0, 0
	for i, cand := range sc.idle {
		rate := rateLocked(&v.q, cand.s.rt)
		if len(hashes) > 0 {
			rate += sc.matches[i].Pending
			prefixTop = max(prefixTop, sc.matches[i].Pending)
		}
		sc.rates = append(sc.rates, rate)
		least = min(least, loadFraction(cand.Candidate))
		top = max(top, rate)
	}
	if top == 0 {
		if len(hashes) == 0 {
			c, ok = r.pick(v) // nothing rated: the router's own pick
			return c, ok, PrefixNone, 0
		}
		return sc.leastLoaded(r, v, least), true, PrefixMiss, 0
	}
	best, bestLoad := -1, 0.0
	for i, cand := range sc.idle {
		load := loadFraction(cand.Candidate)
		if load-least > PrefixLoadBound {
			continue
		}
		if m := sc.rates[i]; best < 0 || m > sc.rates[best] || (m == sc.rates[best] && load < bestLoad) {
			best, bestLoad = i, load
		}
	}
	// The least loaded candidate is within the bound: best >= 0.
	c = Lease(sc.idle[best])
	if len(hashes) == 0 {
		return c, true, PrefixNone, 0
	}
	return c, true, prefixOutcome(sc.matches[best].Pending, prefixTop), sc.matches[best].Confirmed
}

// prefixOutcome is the outcome of a decision whose policy is expected to
// hold pending blocks of the prompt, when the most any candidate holds is
// top.
func prefixOutcome(pending, top int) string {
	switch {
	case top == 0:
		return PrefixMiss
	case pending == top:
		return PrefixHit
	}
	return PrefixBalanced
}

// leastLoaded is the choice of a miss: the router's pick when its policy
// is among the least loaded of the idle candidates (least is their
// lowest load), else the first of those.
func (sc *prefixScratch) leastLoaded(r Selector, v View, least float64) Choice {
	c, ok := r.pick(v)
	for _, i := range sc.idle {
		if ok && c.s != nil && i.s.rt == c.s.rt && loadFraction(i.Candidate) <= least {
			return c
		}
	}
	for _, i := range sc.idle {
		if loadFraction(i.Candidate) <= least {
			return Lease(i)
		}
	}
	return c
}

// judgeLocked is the outcome and confirmed match of a decision made
// outside the score stage (a session's home, a waiter's hand-off, a
// router that hands out without a lease): the chosen policy rt against
// every available policy that passes q, busy or not. Caller must hold mu.
func (st *State) judgeLocked(rt *policyRuntime, q *Query, hashes []prefix.Hash) (outcome string, confirmed int) {
	sc := &st.prefixScratch
	sc.ids = append(sc.ids[:0], rt.policy.ID)
	for _, o := range st.ledger.snap.rts {
		if o != rt && o.available() && q.ok(o) {
			sc.ids = append(sc.ids, o.policy.ID)
		}
	}
	sc.matches = st.prefix.Match(hashes, sc.ids, sc.matches)
	top := 0
	for _, m := range sc.matches {
		top = max(top, m.Pending)
	}
	return prefixOutcome(sc.matches[0].Pending, top), sc.matches[0].Confirmed
}

// notePrefixLocked completes a decision with hashes: its outcome and
// match, the hashes recorded pending on its policy, the counts. Caller
// must hold mu.
func (st *State) notePrefixLocked(d *Decision, hashes []prefix.Hash, outcome string, confirmed int) {
	d.PrefixOutcome, d.PrefixMatch = outcome, confirmed
	st.prefix.RecordPending(d.Policy.ID, hashes)
	st.countPrefix(outcome, confirmed, len(hashes))
}

// countPrefix counts one decision of a prompt of blocks blocks: its
// outcome and its policy's confirmed match.
func (st *State) countPrefix(outcome string, confirmed, blocks int) {
	st.prefixN.of(outcome).Add(1)
	st.prefixN.matched.Add(uint64(confirmed))
	st.prefixN.prompt.Add(uint64(blocks))
}

// PrefixRelease reports the end of a request sent to policy policyID with
// the chain hashes (the decision recorded them pending): ok when the
// engine answered it, with cachedTokens the prompt tokens the engine said
// it had cached, or -1 when it said nothing (the blocks are confirmed, and
// the policy's chain is cut back when the engine had fewer:
// prefix.Index.Confirm); not ok when it failed before an answer (its
// pending blocks are dropped). A policy no longer registered is ignored.
// It takes no routing lock.
func (st *State) PrefixRelease(policyID string, hashes []prefix.Hash, ok bool, cachedTokens int) {
	if len(hashes) == 0 || !st.registered(policyID) {
		return
	}
	if ok {
		st.prefix.Confirm(policyID, capHashes(hashes), cachedTokens)
	} else {
		st.prefix.DropPending(policyID, capHashes(hashes))
	}
	st.forgetIfRemoved(policyID)
}

// PrefixAdd records that policy policyID holds the blocks hashes,
// confirmed: a prompt and the tokens it generated, reported once the
// answer is back (POST /release prefix_hashes), so that the next turn,
// which resends both, matches. A policy no longer registered is ignored.
// It takes no routing lock.
func (st *State) PrefixAdd(policyID string, hashes []prefix.Hash) {
	if len(hashes) == 0 || !st.registered(policyID) {
		return
	}
	st.prefix.Add(policyID, capHashes(hashes))
	st.forgetIfRemoved(policyID)
}

// registered reports whether the published snapshot has policy id.
func (st *State) registered(id string) bool {
	_, ok := st.snap.Load().ByID(id)
	return ok
}

// forgetIfRemoved removes id from the Index when it left the fleet while
// an update of the Index for it ran outside the lock: the removal
// (updateLocked) publishes the snapshot before it removes the policy's
// entries, so a writer that saw it registered and wrote after the removal
// sees it gone here.
func (st *State) forgetIfRemoved(id string) {
	if !st.registered(id) {
		st.prefix.Remove(id)
	}
}

// PrefixStats is the prefix index and the score stage's counts, for
// /stats.
type PrefixStats struct {
	// Index is the index's own state (per policy: indexed tokens,
	// evictions; index bytes).
	Index prefix.Stats
	// Decisions counts decisions by outcome (PrefixOutcomes).
	Decisions map[string]uint64
	// MatchedTokens and PromptTokens are the confirmed matched blocks of
	// the chosen policies and the blocks of the prompts, summed over the
	// decisions with hashes, at prefix.BlockTokens tokens a block.
	MatchedTokens, PromptTokens uint64
}

// PrefixStats returns the prefix index's state and the decisions' counts.
func (st *State) PrefixStats() PrefixStats {
	out := PrefixStats{Index: st.prefix.Stats(), Decisions: make(map[string]uint64, len(PrefixOutcomes))}
	for _, o := range PrefixOutcomes {
		out.Decisions[o] = st.prefixN.of(o).Load()
	}
	out.MatchedTokens = st.prefixN.matched.Load() * prefix.BlockTokens
	out.PromptTokens = st.prefixN.prompt.Load() * prefix.BlockTokens
	return out
}

// clearPrefixLocked forgets what policy rt's engine was expected to cache:
// its weight version changed, it restarted (it came back healthy after
// failing), or its memory was released (asleep). Caller must hold mu.
func (st *State) clearPrefixLocked(rt *policyRuntime) {
	st.prefix.Clear(rt.policy.ID)
}

// PrefixRecord records hashes pending on each of the policies with the
// given (distinct) ids, as a decision does for its policy: the policies a
// stateless /assign (current_loads) gave the tasks of one prompt, which
// are not steered (a tracked /assign records its own, assign_score.go),
// so that later requests with the same prompt match. Unknown ids are
// ignored. It takes no routing lock.
func (st *State) PrefixRecord(ids []string, hashes []prefix.Hash) {
	if len(hashes) == 0 {
		return
	}
	hashes = capHashes(hashes)
	for _, id := range ids {
		if !st.registered(id) {
			continue
		}
		st.prefix.RecordPending(id, hashes)
		st.forgetIfRemoved(id)
	}
}
