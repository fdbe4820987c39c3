package main

import (
	"slices"
	"sync"
)

// cacheAware is SGLang Model Gateway's cache_aware policy, written from its
// source; the gateway of prefix_gateway.go runs it in front of the
// fleet, as SMG's HTTP router does. It is the rule of
// sgl-model-gateway/src/policies/cache_aware.rs (select_worker), with the
// approximate radix tree of sgl-model-gateway/src/policies/tree.rs
// (insert, prefix_match), sgl-project/sglang commit
// b93974f140de1e545d9134d87e77f0bd1fbf3014 (tree.rs at
// 24ce7f6c91a1b0fc65534cedf959e22423920b75), with the defaults of its
// command line (parse_policy_config: cache_threshold 0.3,
// balance_abs_threshold 64, balance_rel_threshold 1.5).
//
// For each request, with load the requests the gateway has in flight on a
// worker:
//
//   - The system is imbalanced when max - min load > balance_abs_threshold
//     and max > balance_rel_threshold · min: the request goes to the least
//     loaded worker (the first of them), and its prompt is inserted into
//     the tree for that worker.
//   - Otherwise the tree's longest prefix match names a worker; when the
//     match rate (matched / prompt length) exceeds cache_threshold the
//     request goes there, else to the least loaded worker. The prompt is
//     inserted for the chosen worker.
//
// SGLang's tree holds the characters of the request text; for token-id
// prompts this one holds the token ids (one "character" a token), the only
// change of substance. prefix_match returns "the first tenant" of the
// deepest node reached, a DashMap's first key: here the lowest worker index
// among the node's tenants, which is as fixed for a given set of workers
// as the DashMap's order is. Its background eviction (every 120 s, down to
// max_tree_size 67,108,864 characters) never runs within a run of seconds,
// so it is not written. It knows nothing of a worker's capacity: a worker
// it chooses queues the request itself, as an engine does. It is safe for
// concurrent use.
type cacheAware struct {
	cacheThreshold float64
	absThreshold   int
	relThreshold   float64

	mu    sync.Mutex
	loads []int
	root  *radixNode
}

// SGLang Model Gateway's defaults (parse_policy_config in
// sgl-model-gateway/src/main.rs).
const (
	smgCacheThreshold      = 0.3
	smgBalanceAbsThreshold = 64
	smgBalanceRelThreshold = 1.5
)

// newCacheAware returns the policy over n workers with SGLang's defaults;
// every worker starts as a tenant of the root (init_workers inserts "").
func newCacheAware(n int) *cacheAware {
	c := &cacheAware{
		cacheThreshold: smgCacheThreshold, absThreshold: smgBalanceAbsThreshold, relThreshold: smgBalanceRelThreshold,
		loads: make([]int, n), root: newRadixNode(nil),
	}
	for i := range n {
		c.root.tenants[i] = struct{}{}
	}
	return c
}

// pick chooses the worker for prompt, records the prompt in its tree and
// counts the request in its load until done is called with the same
// index.
func (c *cacheAware) pick(prompt []int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	minLoad, maxLoad := c.loads[0], c.loads[0]
	least := 0
	for i, l := range c.loads {
		if l < minLoad {
			minLoad, least = l, i
		}
		maxLoad = max(maxLoad, l)
	}
	chosen := least
	imbalanced := maxLoad-minLoad > c.absThreshold && float64(maxLoad) > float64(minLoad)*c.relThreshold
	if !imbalanced {
		matched, tenant := c.root.prefixMatch(prompt)
		rate := 0.0
		if len(prompt) > 0 {
			rate = float64(matched) / float64(len(prompt))
		}
		if rate > c.cacheThreshold && tenant >= 0 {
			chosen = tenant
		}
	}
	c.root.insert(prompt, chosen)
	c.loads[chosen]++
	return chosen
}

// done ends a request picked for worker i.
func (c *cacheAware) done(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loads[i]--
}

// radixNode is a node of the approximate radix tree (tree.rs Node): the
// tokens of its edge, its children by their first token, and the workers
// (tenants) that were sent a prompt through it.
type radixNode struct {
	parent   *radixNode
	text     []int64
	children map[int64]*radixNode
	tenants  map[int]struct{}
}

func newRadixNode(parent *radixNode) *radixNode {
	return &radixNode{parent: parent, children: map[int64]*radixNode{}, tenants: map[int]struct{}{}}
}

// sharedPrefix is how many leading tokens a and b share.
func sharedPrefix(a, b []int64) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// insert records that tenant was sent text (tree.rs insert): every node
// on its path gains the tenant, a node matched in part is split, and the
// unmatched rest becomes a new leaf.
func (root *radixNode) insert(text []int64, tenant int) {
	cur := root
	cur.tenants[tenant] = struct{}{}
	for i := 0; i < len(text); {
		child, ok := cur.children[text[i]]
		if !ok {
			leaf := newRadixNode(cur)
			leaf.text = slices.Clone(text[i:])
			leaf.tenants[tenant] = struct{}{}
			cur.children[text[i]] = leaf
			return
		}
		n := sharedPrefix(child.text, text[i:])
		if n < len(child.text) {
			// Split: a new node holds the shared part, with the child's
			// tenants, and the child keeps the rest below it.
			mid := newRadixNode(cur)
			mid.text = child.text[:n:n]
			for t := range child.tenants {
				mid.tenants[t] = struct{}{}
			}
			child.text, child.parent = child.text[n:], mid
			mid.children[child.text[0]] = child
			cur.children[text[i]] = mid
			child = mid
		}
		child.tenants[tenant] = struct{}{}
		cur = child
		i += n
	}
}

// prefixMatch is tree.rs prefix_match: the tokens of text matched along
// the tree (a node matched in part counts its shared tokens and ends the
// walk) and the first tenant of the deepest node reached, -1 when it has
// none.
func (root *radixNode) prefixMatch(text []int64) (int, int) {
	cur, i := root, 0
	for i < len(text) {
		child, ok := cur.children[text[i]]
		if !ok {
			break
		}
		n := sharedPrefix(child.text, text[i:])
		i += n
		cur = child
		if n < len(child.text) {
			break
		}
	}
	tenant := -1
	for t := range cur.tenants {
		if tenant < 0 || t < tenant {
			tenant = t
		}
	}
	return i, tenant
}
