package prefix

import (
	"math/bits"
	"sync"
)

// Index is the router's picture of the prefix caches of its policies: which
// blocks (by Hash) each policy is expected to hold. It is the state of the
// prefix scorer, owned by one type, bounded in memory, and safe for
// concurrent use: its own mutex guards it, held only for the length of one
// call. Prompts are hashed outside it (TokenHashes), so a caller can hash
// outside its own routing lock and read the Index under it.
//
// Policies are named by their stable string ids (routing.Policy.ID), mapped
// inside to small integers. A policy comes into the Index with its first
// RecordPending, Confirm, Add or SetCapacity, and leaves with Remove.
//
// Blocks are pending from dispatch (RecordPending), so that samples 2..n of
// a group sent together follow the first, and confirmed once an answer
// shows the engine holds them (Confirm, Add). Match reports both; a caller
// claims only confirmed blocks (X-Prefix-Match) and lets pending ones
// attract.
//
// # Steps
//
// The Index keeps one entry for each step of Stride blocks of a chain (by
// default 4 blocks, 64 tokens): the hash of the step's last block, which
// names the whole prefix up to it. Matches, budgets and counts come in
// blocks, whole steps of them; the trailing blocks of a chain that fill no
// step are not kept, and an engine's count of cached tokens cuts a policy
// back in whole steps. A prefix shorter than a step saves little prefill;
// the Index does a quarter of the work of one kept block by block, with a
// map a quarter the size (BenchmarkRecordUnique: 8k-token prompts that
// share nothing, 8 policies at their budget, 442 µs a prompt by blocks
// against 67 µs by steps).
//
// # Memory
//
// One map goes from a step's hash to its 32-byte entry in a slab of
// blocks: the first of the policies holding it, and two 64-bit masks of the
// policy slots (the first 64) that hold it and hold it confirmed, so a hot
// prefix is stored once and matched in one step per entry whatever the
// number of policies holding it (Match on an 8k-token prompt all of 64
// policies hold: 4 µs, against 166 µs walking the holders). Each (entry,
// policy) pair is one 20-byte entry in a slab of nodes, linked into its
// policy's LRU list and into the list of its entry's holders. Each policy's
// list is bounded by its token budget (SetCapacity: the engine's KV size in
// tokens when it reports one, else Options.DefaultTokens), at Stride ×
// BlockTokens tokens an entry; the whole Index by Options.MaxBytes, beyond
// which the policy holding the most entries loses its least recent ones.
//
// Measured (TestMemoryPerBlock: runtime.MemStats around 2M blocks, amd64,
// Go 1.26), an entry costs about 96 bytes of heap when one policy holds it
// (its slab entry, its node, and its map slot with the map's spare room,
// the slabs and the map growing by doubling): 24 bytes a block. Each
// further policy holding it adds a 20-byte node, and up to as much again
// of the slab's spare room (measured 6 to 12 bytes an entry while that
// room lasts): 5 to 10 bytes a block. The leader's index for 64 engines of
// 2M tokens of KV each, 2M/16 = 131k blocks an engine, 8.4M (block,
// engine) pairs in all, takes about 200 MB when no two engines share a
// block, and about 45 to 85 MB when they all hold the same 131k blocks
// (131k × 24 bytes + 63 × 131k × 5 to 10 bytes). IndexBytes, the estimate
// that Options.MaxBytes caps, counts 24 bytes a pair and 72 a distinct
// entry (96 for an entry one policy holds). Go maps do not shrink: after a
// Clear the memory stays with the Index, for the entries that follow.
type Index struct {
	mu        sync.Mutex
	opts      Options
	slots     map[string]int // policy id → index in pols
	pols      []*policy      // nil where a removed policy's slot is free
	freeSlot  []int
	heads     map[Hash]int32 // block hash → its entry in blocks
	blocks    []block
	freeBlock int32 // first free entry of blocks, linked by first; -1 none
	nodes     []node
	freeNode  int32 // first free entry of nodes, linked by next; -1 none
	pairs     int   // (block, policy) entries in use

	// scratch of Match: per slot, the confirmed and held prefix lengths.
	conf, held []int32
	touched    []int
	steps      []Hash // scratch of stepsLocked
}

// block is one distinct block: its hash, its list of holders, and which
// of the first 64 policy slots hold it (held) and hold it confirmed
// (conf), so that Match reads a block's holders in one step however many
// there are.
type block struct {
	hash       Hash
	first      int32 // its first holder in nodes
	held, conf uint64
}

// maskSlots is how many policy slots the blocks' held and conf masks
// cover; an Index with more slots matches by walking the holders.
const maskSlots = 64

// node is one (block, policy) pair: an entry of its policy's LRU list
// (prev towards the most recent) and of its block's list of holders.
type node struct {
	prev, next int32 // LRU neighbours in the policy's list; -1 none
	holder     int32 // next node of the same block; -1 none
	blk        int32 // its block in blocks
	slot       uint16
	confirmed  bool
	inRun      bool // in the run recordLocked keeps in place; false between calls
}

// bit is slot s's bit in a block's masks, 0 beyond maskSlots.
func bit(s uint16) uint64 {
	if s >= maskSlots {
		return 0
	}
	return 1 << s
}

// policy is one policy's list: head is its most recent block, tail its
// least recent.
type policy struct {
	id                string
	head, tail        int32
	blocks, pending   int
	capTokens         int // 0: Options.DefaultTokens
	evictions, clears uint64
}

const none = -1

// Sizes behind IndexBytes: a node, and a map slot with its share of the
// map's spare room.
const (
	entryBytes = 24
	mapBytes   = 72
)

// Options configure an Index. Zero fields take the defaults.
type Options struct {
	// DefaultTokens is a policy's budget in tokens until SetCapacity gives
	// its engine's KV size (--prefix-index-tokens). Default
	// DefaultPolicyTokens.
	DefaultTokens int
	// MaxBytes caps the whole Index's memory, as IndexBytes estimates it.
	// Default DefaultMaxBytes.
	MaxBytes int64
	// Stride is how many blocks of a chain one entry of the Index stands
	// for: it keeps the hash of every Stride-th block, the end of each
	// step. Default DefaultStride.
	Stride int
}

// Defaults of Options.
const (
	// DefaultPolicyTokens is 1M tokens: an engine's KV cache of a mid-size
	// model on one 80 GB GPU is 0.3M–2M tokens.
	DefaultPolicyTokens = 1 << 20
	// DefaultMaxBytes is 1 GiB, room for 64 engines of 2M tokens each.
	DefaultMaxBytes = 1 << 30
	// DefaultStride is 4 blocks, 64 tokens: a prefix shorter than that
	// saves an engine little prefill, and an Index of 64-token steps does a
	// quarter of the work and holds a quarter of the memory of one of
	// blocks (BenchmarkRecordUnique: 8k-token prompts that share nothing,
	// 8 policies at their budget, 442 µs a prompt by blocks, 85 by steps,
	// its map 4 times smaller and kinder to the CPU's caches).
	DefaultStride = 4
)

// NewIndex returns an empty Index.
func NewIndex(opts Options) *Index {
	if opts.DefaultTokens <= 0 {
		opts.DefaultTokens = DefaultPolicyTokens
	}
	if opts.Stride <= 0 {
		opts.Stride = DefaultStride
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	return &Index{opts: opts, slots: map[string]int{}, heads: map[Hash]int32{}, freeBlock: none, freeNode: none}
}

// Stride is how many blocks one entry of the Index stands for
// (Options.Stride): matches come in multiples of it.
func (x *Index) Stride() int { return x.opts.Stride }

// Match is what the Index expects one policy to hold of a chain of hashes.
type Match struct {
	// Confirmed is the length of the longest prefix of the chain whose
	// blocks are all confirmed on the policy: blocks an answer showed the
	// engine holds.
	Confirmed int
	// Pending is the length of the longest prefix whose blocks are each
	// confirmed or pending (recorded at dispatch, not yet answered);
	// Pending >= Confirmed.
	Pending int
}

// Match writes to out[i] what the Index expects policy ids[i] to hold of
// the chain hashes (a policy it does not know holds nothing), growing out
// to len(ids), and returns it. The work is one map lookup per block of the
// longest prefix any policy holds (and, beyond 64 policy slots, one step
// per holder of each); it allocates only to grow out. It does not change
// the LRU order: only what is sent to a policy does.
func (x *Index) Match(hashes []Hash, ids []string, out []Match) []Match {
	out = append(out[:0], make([]Match, len(ids))...)
	x.mu.Lock()
	defer x.mu.Unlock()
	hashes = x.stepsLocked(hashes)
	k := x.opts.Stride
	if len(x.conf) < len(x.pols) {
		x.conf, x.held = make([]int32, len(x.pols)), make([]int32, len(x.pols))
	}
	if len(x.pols) <= maskSlots {
		x.matchMasksLocked(hashes)
		for i, id := range ids {
			if s, ok := x.slots[id]; ok {
				out[i] = Match{Confirmed: k * int(x.conf[s]), Pending: k * int(x.held[s])}
			}
		}
		return out
	}
	for i, h := range hashes {
		b, ok := x.heads[h]
		if !ok {
			break
		}
		grew := false
		for n := x.blocks[b].first; n != none; n = x.nodes[n].holder {
			nd := &x.nodes[n]
			s := int(nd.slot)
			if x.held[s] != int32(i) {
				continue
			}
			if i == 0 {
				x.touched = append(x.touched, s)
			}
			x.held[s]++
			grew = true
			if nd.confirmed && x.conf[s] == int32(i) {
				x.conf[s]++
			}
		}
		if !grew {
			break
		}
	}
	for i, id := range ids {
		if s, ok := x.slots[id]; ok {
			out[i] = Match{Confirmed: k * int(x.conf[s]), Pending: k * int(x.held[s])}
		}
	}
	for _, s := range x.touched {
		x.conf[s], x.held[s] = 0, 0
	}
	x.touched = x.touched[:0]
	return out
}

// matchMasksLocked is Match by the blocks' masks: every slot's held and
// confirmed prefix lengths of hashes into x.held and x.conf, each written
// once, when the slot drops out of the run of blocks it holds (or at the
// end). Caller must hold mu; len(x.pols) <= maskSlots.
func (x *Index) matchMasksLocked(hashes []Hash) {
	all := uint64(1)<<len(x.pols) - 1
	if len(x.pols) == maskSlots {
		all = ^uint64(0)
	}
	held, conf := all, all
	i := 0
	for ; i < len(hashes) && held != 0; i++ {
		var h, c uint64
		if b, ok := x.heads[hashes[i]]; ok {
			h, c = x.blocks[b].held, x.blocks[b].conf
		}
		dropOut(x.held, held&^h, i)
		dropOut(x.conf, conf&^c, i)
		held, conf = held&h, conf&c
	}
	dropOut(x.held, held, i)
	dropOut(x.conf, conf, i)
}

// dropOut sets lengths[s] to n for each slot s in mask.
func dropOut(lengths []int32, mask uint64, n int) {
	for ; mask != 0; mask &= mask - 1 {
		lengths[bits.TrailingZeros64(mask)] = int32(n)
	}
}

// RecordPending records that the blocks hashes were sent to policy id:
// blocks it does not hold yet become pending, and every block of the chain
// becomes its most recent, the first block last so that the chain's deepest
// blocks are the first to go when its budget is exceeded (as vLLM's free
// queue evicts the tail of a chain first). At most MaxBlocks are used.
func (x *Index) RecordPending(id string, hashes []Hash) {
	x.record(id, hashes, false)
}

// Add records that policy id holds the blocks hashes, confirmed: those of
// a prompt and the tokens generated after it, once the answer is back, so
// that the next turn, which resends both, matches.
func (x *Index) Add(id string, hashes []Hash) {
	x.record(id, hashes, true)
}

// Confirm records the answer of a request sent to policy id with the
// chain hashes: its pending blocks become confirmed. cachedTokens is how
// many of the prompt's tokens the engine reported it had cached (SGLang's
// meta_info.cached_tokens, vLLM's usage.prompt_tokens_details
// .cached_tokens), or -1 when it reported none. When the engine had fewer
// blocks of the chain than the Index held confirmed for it, the Index's
// picture of the policy was too rich and is cut back: when the engine had
// not even the first block it was flushed behind the router's back (a
// /flush_cache sent to it directly, a restart) and the policy is cleared;
// otherwise the policy loses as many of its least recent blocks as the
// engine was found short. Either way the chain itself, which the engine
// has just computed, is then held confirmed.
func (x *Index) Confirm(id string, hashes []Hash, cachedTokens int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	hashes = x.stepsLocked(hashes)
	s := x.slotLocked(id)
	if cachedTokens >= 0 {
		// An engine computes a prompt's last token again, to sample the
		// next, so it reports up to one block less than it holds: SGLang
		// matches at most input_len - 1 tokens (Req._compute_max_prefix_len,
		// python/sglang/srt/managers/schedule_batch.py, v0.5.18), vLLM at
		// most num_tokens - 1 in whole blocks (KVCacheManager.
		// get_computed_blocks, vllm/v1/core/kv_cache_manager.py).
		// In steps; want is all of the chain, which had cannot be short
		// of: no need to look.
		had := (cachedTokens/BlockTokens + 1) / x.opts.Stride
		want := len(hashes)
		if had < want {
			want = x.confirmedPrefixLocked(s, hashes)
		}
		switch {
		case had >= want:
		case cachedTokens < BlockTokens:
			x.clearLocked(s)
		default:
			p := x.pols[s]
			for range want - had {
				if p.tail == none {
					break
				}
				x.removeLocked(p.tail)
				p.evictions++
			}
		}
	}
	x.recordLocked(s, hashes, true)
}

// DropPending forgets the blocks of hashes that are still pending on
// policy id: a request that failed before the engine answered.
func (x *Index) DropPending(id string, hashes []Hash) {
	x.mu.Lock()
	defer x.mu.Unlock()
	s, ok := x.slots[id]
	if !ok {
		return
	}
	for _, h := range x.stepsLocked(hashes) {
		if n, _ := x.findLocked(h, s); n != none && !x.nodes[n].confirmed {
			x.removeLocked(n)
		}
	}
}

// Clear forgets every block of policy id, keeping its budget: its weight
// version changed, it restarted or its cache was flushed.
func (x *Index) Clear(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if s, ok := x.slots[id]; ok {
		x.clearLocked(s)
	}
}

// Remove forgets policy id altogether: it left the fleet.
func (x *Index) Remove(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	s, ok := x.slots[id]
	if !ok {
		return
	}
	x.clearLocked(s)
	delete(x.slots, id)
	x.pols[s] = nil
	x.freeSlot = append(x.freeSlot, s)
}

// SetCapacity sets policy id's budget to tokens, its engine's KV size
// (SGLang's max_total_num_tokens; vLLM's num_gpu_blocks × block_size);
// tokens <= 0 restores Options.DefaultTokens. Blocks beyond the budget go
// at once, least recent first.
func (x *Index) SetCapacity(id string, tokens int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.slotLocked(id)
	x.pols[s].capTokens = max(tokens, 0)
	x.evictLocked(s)
}

// PolicyStats is one policy's part of the Index.
type PolicyStats struct {
	ID string `json:"id"`
	// IndexedTokens is the tokens of the blocks the policy holds, pending
	// or confirmed (BlockTokens a block); PendingTokens those pending.
	IndexedTokens int64 `json:"indexed_tokens"`
	PendingTokens int64 `json:"pending_tokens"`
	// CapacityTokens is the policy's budget.
	CapacityTokens int64 `json:"capacity_tokens"`
	// Evictions counts blocks dropped for the budget, the byte cap or a
	// cut-back; Clears the clears of the whole policy.
	Evictions uint64 `json:"evictions"`
	Clears    uint64 `json:"clears"`
}

// Stats is the whole Index's state, for /stats.
type Stats struct {
	// Policies are the policies, in no particular order.
	Policies []PolicyStats `json:"policies"`
	// Blocks is how many distinct blocks are indexed, Entries how many
	// (block, policy) pairs.
	Blocks  int `json:"blocks"`
	Entries int `json:"entries"`
	// IndexBytes is the estimate of the Index's memory that MaxBytes caps.
	IndexBytes int64 `json:"index_bytes"`
	MaxBytes   int64 `json:"max_bytes"`
}

// Stats returns the Index's state.
func (x *Index) Stats() Stats {
	x.mu.Lock()
	defer x.mu.Unlock()
	k := x.opts.Stride
	st := Stats{Blocks: k * len(x.heads), Entries: k * x.pairs, IndexBytes: x.bytesLocked(), MaxBytes: x.opts.MaxBytes}
	step := int64(x.opts.Stride) * BlockTokens // tokens
	for s, p := range x.pols {
		if p == nil {
			continue
		}
		st.Policies = append(st.Policies, PolicyStats{
			ID: p.id, IndexedTokens: int64(p.blocks) * step, PendingTokens: int64(p.pending) * step,
			CapacityTokens: int64(x.capTokensLocked(s)), Evictions: p.evictions * uint64(x.opts.Stride), Clears: p.clears,
		})
	}
	return st
}

// record is RecordPending and Add.
func (x *Index) record(id string, hashes []Hash, confirmed bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.recordLocked(x.slotLocked(id), x.stepsLocked(hashes), confirmed)
}

// stepsLocked is the chain hashes as the Index keeps it: its first
// MaxBlocks blocks, of them the last of each step of Stride blocks (a
// chain's trailing blocks that fill no step are not kept). The slice is
// hashes itself or the Index's scratch. Caller must hold mu.
func (x *Index) stepsLocked(hashes []Hash) []Hash {
	hashes = hashes[:min(len(hashes), MaxBlocks)]
	k := x.opts.Stride
	if k == 1 {
		return hashes
	}
	x.steps = x.steps[:0]
	for i := k - 1; i < len(hashes); i += k {
		x.steps = append(x.steps, hashes[i])
	}
	return x.steps
}

// recordLocked makes the blocks of hashes policy s's most recent, in the
// chain's order from the head of its list (the first block the most
// recent of all), marking them confirmed if confirmed (a confirmed block
// stays confirmed), then enforces the budgets. Caller must hold mu.
//
// The chain's longest prefix that heads the list already, in order, keeps
// its places: what was just recorded is recorded again (the answer of the
// request that sent it, the samples of a GRPO group, a conversation's next
// turn, whose earlier turns head the list), and only the blocks after that
// run are looked up and moved, in behind it.
func (x *Index) recordLocked(s int, hashes []Hash, confirmed bool) {
	p := x.pols[s]
	at, run := int32(none), 0 // the run's last node, and its length
	for n := p.head; run < len(hashes) && n != none && x.blocks[x.nodes[n].blk].hash == hashes[run]; n = x.nodes[n].next {
		x.confirmLocked(n, confirmed)
		x.nodes[n].inRun = true
		at = n
		run++
	}
	for i := len(hashes) - 1; i >= run; i-- {
		b, known := x.heads[hashes[i]]
		n := int32(none)
		if known {
			n, _ = x.holderLocked(b, s)
		}
		switch {
		case n == none:
			n = x.insertLocked(hashes[i], b, known, s, at)
		case x.nodes[n].inRun:
			continue // a hash the chain repeats: kept in the run
		default:
			x.unlinkLRULocked(n)
			x.linkAfterLocked(n, at)
		}
		x.confirmLocked(n, confirmed)
	}
	for n, k := p.head, 0; k < run; n, k = x.nodes[n].next, k+1 {
		x.nodes[n].inRun = false
	}
	x.evictLocked(s)
	for x.bytesLocked() > x.opts.MaxBytes && x.pairs > 0 {
		big := s
		for t, q := range x.pols {
			if q != nil && q.blocks > x.pols[big].blocks {
				big = t
			}
		}
		x.removeLocked(x.pols[big].tail)
		x.pols[big].evictions++
	}
}

// confirmLocked marks node n confirmed if confirmed. Caller must hold mu.
func (x *Index) confirmLocked(n int32, confirmed bool) {
	if nd := &x.nodes[n]; confirmed && !nd.confirmed {
		nd.confirmed = true
		x.blocks[nd.blk].conf |= bit(nd.slot)
		x.pols[nd.slot].pending--
	}
}

// confirmedPrefixLocked is Match's Confirmed for policy s alone. Caller
// must hold mu.
func (x *Index) confirmedPrefixLocked(s int, hashes []Hash) int {
	for i, h := range hashes {
		if n, _ := x.findLocked(h, s); n == none || !x.nodes[n].confirmed {
			return i
		}
	}
	return len(hashes)
}

// slotLocked returns the slot of policy id, making one. Caller must hold
// mu.
func (x *Index) slotLocked(id string) int {
	if s, ok := x.slots[id]; ok {
		return s
	}
	p := &policy{id: id, head: none, tail: none}
	var s int
	if n := len(x.freeSlot); n > 0 {
		s = x.freeSlot[n-1]
		x.freeSlot = x.freeSlot[:n-1]
		x.pols[s] = p
	} else {
		s = len(x.pols)
		x.pols = append(x.pols, p)
	}
	x.slots[id] = s
	return s
}

// capTokensLocked is policy s's budget in tokens. Caller must hold mu.
func (x *Index) capTokensLocked(s int) int {
	if t := x.pols[s].capTokens; t != 0 {
		return t
	}
	return x.opts.DefaultTokens
}

// capBlocksLocked is policy s's budget in entries: whole steps of Stride
// blocks, at least one. Caller must hold mu.
func (x *Index) capBlocksLocked(s int) int {
	return max(x.capTokensLocked(s)/(BlockTokens*x.opts.Stride), 1)
}

// bytesLocked is the IndexBytes estimate. Caller must hold mu.
func (x *Index) bytesLocked() int64 {
	return int64(x.pairs)*entryBytes + int64(len(x.heads))*mapBytes
}

// evictLocked drops policy s's least recent blocks beyond its budget.
// Caller must hold mu.
func (x *Index) evictLocked(s int) {
	p, limit := x.pols[s], x.capBlocksLocked(s)
	for p.blocks > limit {
		x.removeLocked(p.tail)
		p.evictions++
	}
}

// clearLocked drops every block of policy s. Caller must hold mu.
func (x *Index) clearLocked(s int) {
	p := x.pols[s]
	for p.tail != none {
		x.removeLocked(p.tail)
	}
	p.clears++
}

// findLocked returns policy s's node of block h and the holder before it
// (none when it is the first), or none. Caller must hold mu.
func (x *Index) findLocked(h Hash, s int) (n, before int32) {
	b, ok := x.heads[h]
	if !ok {
		return none, none
	}
	return x.holderLocked(b, s)
}

// holderLocked returns policy s's node of block b and the holder before
// it (none when it is the first), or none. Caller must hold mu.
func (x *Index) holderLocked(b int32, s int) (n, before int32) {
	before = none
	for n = x.blocks[b].first; n != none; before, n = n, x.nodes[n].holder {
		if int(x.nodes[n].slot) == s {
			return n, before
		}
	}
	return none, none
}

// insertLocked adds a pending node of block h for policy s, in its list
// after node at (the most recent when at is none), and returns it; b is
// the block's entry when known (the caller looked h up already). Caller
// must hold mu.
func (x *Index) insertLocked(h Hash, b int32, known bool, s int, at int32) int32 {
	var n int32
	if x.freeNode != none {
		n = x.freeNode
		x.freeNode = x.nodes[n].next
	} else {
		n = int32(len(x.nodes))
		x.nodes = append(x.nodes, node{})
	}
	if !known {
		if x.freeBlock != none {
			b = x.freeBlock
			x.freeBlock = x.blocks[b].first
		} else {
			b = int32(len(x.blocks))
			x.blocks = append(x.blocks, block{})
		}
		x.blocks[b] = block{hash: h, first: none}
		x.heads[h] = b
	}
	blk := &x.blocks[b]
	x.nodes[n] = node{prev: none, next: none, holder: blk.first, blk: b, slot: uint16(s)}
	blk.first = n
	blk.held |= bit(uint16(s))
	x.linkAfterLocked(n, at)
	p := x.pols[s]
	p.blocks++
	p.pending++
	x.pairs++
	return n
}

// removeLocked drops node n from its policy and its block. Caller must
// hold mu.
func (x *Index) removeLocked(n int32) {
	nd := &x.nodes[n]
	s := int(nd.slot)
	blk := &x.blocks[nd.blk]
	_, before := x.holderLocked(nd.blk, s)
	blk.held &^= bit(nd.slot)
	blk.conf &^= bit(nd.slot)
	switch {
	case before != none:
		x.nodes[before].holder = nd.holder
	case nd.holder != none:
		blk.first = nd.holder
	default:
		delete(x.heads, blk.hash)
		*blk = block{first: x.freeBlock}
		x.freeBlock = nd.blk
	}
	x.unlinkLRULocked(n)
	p := x.pols[s]
	p.blocks--
	if !nd.confirmed {
		p.pending--
	}
	x.pairs--
	*nd = node{next: x.freeNode}
	x.freeNode = n
}

// unlinkLRULocked takes node n out of its policy's list. Caller must hold
// mu.
func (x *Index) unlinkLRULocked(n int32) {
	nd := &x.nodes[n]
	p := x.pols[nd.slot]
	if nd.prev != none {
		x.nodes[nd.prev].next = nd.next
	} else {
		p.head = nd.next
	}
	if nd.next != none {
		x.nodes[nd.next].prev = nd.prev
	} else {
		p.tail = nd.prev
	}
	nd.prev, nd.next = none, none
}

// linkAfterLocked puts node n, in no list, into its policy's list after
// node at, or at its head (the most recent) when at is none. Caller must
// hold mu.
func (x *Index) linkAfterLocked(n, at int32) {
	nd := &x.nodes[n]
	p := x.pols[nd.slot]
	next := p.head
	if at != none {
		next = x.nodes[at].next
		x.nodes[at].next = n
	} else {
		p.head = n
	}
	nd.prev, nd.next = at, next
	if next != none {
		x.nodes[next].prev = n
	} else {
		p.tail = n
	}
}
