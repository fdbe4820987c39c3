package routing

import (
	"errors"
	"sync"
)

// Limits on the numbers the assignment algorithms accept. A heap key packs
// (load, index) into one uint64, so a load, increased by every task of one
// request, must stay inside 31 bits.
const (
	MaxLoad  = 1 << 29 // |load| of one policy
	MaxTasks = 1 << 20 // tasks in one assignment
)

// ErrNoPolicies is returned when there is no policy to route to: an empty
// load vector, or every policy unavailable. The seed raises
// ValueError("No policies available for routing") for the first case.
var ErrNoPolicies = errors.New("no policies available")

// loadBias shifts loads into the non-negative range so that packed keys
// order like (load, index) tuples.
const loadBias = 1 << 30

func packKey(load int64, idx int) uint64 {
	return uint64(load+loadBias)<<32 | uint64(uint32(idx))
}

func keyIndex(k uint64) int { return int(uint32(k)) }

// keyInc is the packed form of load+1.
const keyInc = 1 << 32

// groupHeap is an indexed binary min-heap over policy positions, ordered by
// keys[pos]. Several groupHeaps may share one keys and one at slice when each
// position belongs to at most one of them.
type groupHeap struct {
	items []int32 // heap of positions
}

func (h *groupHeap) less(keys []uint64, i, j int) bool {
	return keys[h.items[i]] < keys[h.items[j]]
}

func (h *groupHeap) swap(at []int32, i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	at[h.items[i]] = int32(i)
	at[h.items[j]] = int32(j)
}

func (h *groupHeap) init(keys []uint64, at []int32) {
	for i, p := range h.items {
		at[p] = int32(i)
	}
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.down(keys, at, i)
	}
}

// down restores the heap property below i after keys[items[i]] grew.
func (h *groupHeap) down(keys []uint64, at []int32, i int) {
	n := len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.less(keys, r, l) {
			m = r
		}
		if !h.less(keys, m, i) {
			return
		}
		h.swap(at, i, m)
		i = m
	}
}

// leastLoaded is the seed's SimpleRouter on a packed heap: each of n tasks
// goes to the minimum (load, index), whose load then grows by one. keys is
// consumed. Replacing the root and sifting it down is the seed's
// heappop+heappush in one step, with the same result because keys are
// unique.
func leastLoaded(dst []int, keys []uint64, n int) []int {
	h := keys
	heapify(h)
	for range n {
		dst = append(dst, keyIndex(h[0]))
		h[0] += keyInc
		siftDown(h, 0)
	}
	return dst
}

func heapify(h []uint64) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
}

func siftDown(h []uint64, i int) {
	n := len(h)
	x := h[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h[r] < h[l] {
			m = r
		}
		if h[m] >= x {
			break
		}
		h[i] = h[m]
		i = m
	}
	h[i] = x
}

// scratch holds the reusable buffers of one assignment.
type scratch struct {
	keys   []uint64
	at     []int32
	global groupHeap
	groups []groupHeap
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func getScratch(n int) *scratch {
	s := scratchPool.Get().(*scratch)
	s.keys = grow(s.keys, n)
	return s
}

func putScratch(s *scratch) { scratchPool.Put(s) }

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// LeastLoaded returns the seed's SimpleRouter.assign(loads, n): for each of n
// tasks the index of the least-loaded policy, ties to the lowest index, with
// that policy's load raised by one after each pick. loads is not modified.
// It returns ErrNoPolicies for an empty loads and an *InputError for n or a
// load outside the limits.
func LeastLoaded(loads []int64, n int) ([]int, error) {
	return leastLoadedOver(nil, loads, n)
}

func checkAssignInput(loads []int64, n int) error {
	if n < 0 || n > MaxTasks {
		return inputErr("num_tasks", "must be between 0 and %d", MaxTasks)
	}
	if len(loads) == 0 {
		return ErrNoPolicies
	}
	if len(loads) > MaxIndex {
		return inputErr("current_loads", "must have at most %d entries", MaxIndex)
	}
	for _, l := range loads {
		if l < -MaxLoad || l > MaxLoad {
			return inputErr("current_loads", "each load must be between %d and %d", -MaxLoad, MaxLoad)
		}
	}
	return nil
}

// AffinityInput is one node-affinity assignment over a set of candidate
// policies.
type AffinityInput struct {
	// Indices are the candidate policies' indices in ascending order, Loads
	// their loads and Nodes their node ids ("" for none), all of one length.
	Indices []int
	Loads   []int64
	Nodes   []string
	// EnvNode maps an env worker index to its node (the topology's env ids).
	EnvNode map[int]string
	// EnvIDs are the tasks, one per env id.
	EnvIDs []string
}

// NodeAffinity returns the seed's NodeAffinityRouter.assign for the given
// candidates: for each env id in order, the least-loaded candidate on the
// env worker's node (ties to the lowest index), or the least-loaded of all
// when that node has none; the chosen load grows by one. As in the seed, an
// env id whose worker has no node matches the candidates that have no node.
// When no candidate has a node the seed falls back to SimpleRouter, which
// gives the same answer as the loop above. Answers are indices, not
// positions.
func NodeAffinity(in AffinityInput) ([]int, error) {
	if len(in.Loads) != len(in.Indices) || len(in.Nodes) != len(in.Indices) {
		return nil, inputErr("current_loads", "has %d entries for %d policies", len(in.Loads), len(in.Indices))
	}
	if err := checkAssignInput(in.Loads, len(in.EnvIDs)); err != nil {
		return nil, err
	}
	s := getScratch(len(in.Indices))
	defer putScratch(s)
	s.at = grow(s.at, len(in.Indices))
	for pos, l := range in.Loads {
		// The index is the tie-break; positions are in index order, so the
		// position orders the same and maps back to the index at the end.
		s.keys[pos] = packKey(l, pos)
	}

	// One heap per node, one over everything. Each position is in exactly
	// one node heap, so the node heaps share one position table; the global
	// heap keeps its own.
	groupOf := make(map[string]int)
	nodeAt := make([]int32, len(in.Indices))
	s.groups = s.groups[:0]
	memberOf := make([]int32, len(in.Indices))
	for pos, node := range in.Nodes {
		g, ok := groupOf[node]
		if !ok {
			g = len(s.groups)
			groupOf[node] = g
			if len(s.groups) < cap(s.groups) {
				s.groups = s.groups[:g+1]
				s.groups[g].items = s.groups[g].items[:0]
			} else {
				s.groups = append(s.groups, groupHeap{})
			}
		}
		memberOf[pos] = int32(g)
		s.groups[g].items = append(s.groups[g].items, int32(pos))
	}
	for g := range s.groups {
		s.groups[g].init(s.keys, nodeAt)
	}
	s.global.items = grow(s.global.items, len(in.Indices))
	for i := range s.global.items {
		s.global.items[i] = int32(i)
	}
	s.global.init(s.keys, s.at)

	out := make([]int, 0, len(in.EnvIDs))
	for _, env := range in.EnvIDs {
		node := ""
		if w, ok := ParseEnvWorker(env); ok {
			node = in.EnvNode[w]
		}
		var pos int32
		if g, ok := groupOf[node]; ok {
			pos = s.groups[g].items[0]
		} else {
			pos = s.global.items[0]
		}
		out = append(out, in.Indices[pos])
		s.keys[pos] += keyInc
		s.groups[memberOf[pos]].down(s.keys, nodeAt, int(nodeAt[pos]))
		s.global.down(s.keys, s.at, int(s.at[pos]))
	}
	return out, nil
}
