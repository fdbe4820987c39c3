package routing

import (
	"slices"
	"sync"
)

func packKey(load int64, idx int) uint64 {
	return uint64(load+loadBias)<<32 | uint64(uint32(idx))
}

func keyIndex(k uint64) int { return int(uint32(k)) }

// keyInc is the packed form of load+1.
const keyInc = 1 << 32

// leastLoaded is the seed's SimpleRouter over packed (load, position)
// keys, one per position in position order (keys is consumed): each of n
// tasks goes to the minimum key, whose load then grows by one. It appends
// the chosen positions to dst.
//
// The answer is the n smallest of all keys (load+j, position), j >= 0: the
// seed's heap pops them in order. So a policy at least n above the least
// loaded one is never chosen (the least loaded one alone has n smaller
// keys) and is dropped; with fewer tasks than candidates the heap is
// cheapest, otherwise the answer is read off level by level.
func leastLoaded(s *scratch, dst []int, keys []uint64, n int) []int {
	if n == 0 {
		return dst
	}
	lo := keys[0]
	for _, k := range keys {
		lo = min(lo, k)
	}
	cut := (lo>>32 + uint64(n)) << 32 // loads are below 1<<31: no overflow
	m := 0
	for _, k := range keys {
		if k < cut {
			keys[m] = k
			m++
		}
	}
	keys = keys[:m]
	if n < m {
		return leastLoadedHeap(dst, keys, n)
	}
	return leastLoadedLevels(s, dst, keys, n)
}

// leastLoadedHeap is the seed's algorithm: a min-heap of keys, whose root
// is taken, grown and sifted down n times. Replacing the root and sifting
// it down is the seed's heappop+heappush in one step, with the same result
// because keys are unique.
func leastLoadedHeap(dst []int, h []uint64, n int) []int {
	heapify(h)
	for range n {
		dst = append(dst, keyIndex(h[0]))
		h[0] += keyInc
		siftDown(h, 0)
	}
	return dst
}

// leastLoadedLevels lists the smallest keys level by level: at load level
// L every policy whose load is at most L has exactly one key, and they
// come in position order. Sorting the keys once finds when each policy
// joins; then every task costs O(1).
func leastLoadedLevels(s *scratch, dst []int, keys []uint64, n int) []int {
	slices.Sort(keys)
	active, spare := s.active[:0], s.spare[:0] // positions at the level, ascending
	defer func() { s.active, s.spare = active, spare }()
	next := 0 // keys[next:] have not joined yet
	for level := keys[0] >> 32; ; level++ {
		if next < len(keys) && keys[next]>>32 == level {
			j := next
			for j < len(keys) && keys[j]>>32 == level {
				j++
			}
			spare = mergePositions(spare[:0], active, keys[next:j])
			active, spare = spare, active
			next = j
		}
		take := min(n-len(dst), len(active))
		for _, p := range active[:take] {
			dst = append(dst, int(p))
		}
		if len(dst) == n {
			return dst
		}
	}
}

// mergePositions appends to dst the positions of a and of keys, both
// ascending, in ascending order.
func mergePositions(dst, a []int32, keys []uint64) []int32 {
	i, j := 0, 0
	for i < len(a) && j < len(keys) {
		if p := int32(keyIndex(keys[j])); p < a[i] {
			dst = append(dst, p)
			j++
		} else {
			dst = append(dst, a[i])
			i++
		}
	}
	dst = append(dst, a[i:]...)
	for _, k := range keys[j:] {
		dst = append(dst, int32(keyIndex(k)))
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
	active []int32 // least loaded by levels
	spare  []int32
	// Node affinity: one heap of packed keys per node group, each
	// position's group, and a tournament tree over the groups' roots.
	groups  [][]uint64
	groupAt []int32
	tree    []uint64
	dirty   []int32 // groups whose root changed since the tree was updated
	isDirty []bool
	workers []int32 // group by env worker number
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

// loadBias shifts loads into the non-negative range so that packed keys
// order like (load, index) tuples.
const loadBias = 1 << 30
