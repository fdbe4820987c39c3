package routing

import (
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// RingPoints is how many virtual points each policy has on a sticky ring.
// More points spread the sessions more evenly; 128 keeps the largest
// policy's share within a few percent of the mean at a few policies and
// the ring of 1,024 policies at 1.5 MB.
const RingPoints = 128

// A hashRing is a consistent-hashing ring over some of a snapshot's
// policies: RingPoints points per policy, hashed from the policy id with
// xxhash (stable across processes and replicas, unlike hash/maphash), sorted
// by hash. A session key hashes onto the ring and is served by its
// successors in ring order. Rings are built once per snapshot and are
// immutable.
type hashRing struct {
	hashes []uint64 // ascending
	owners []int32  // position in the snapshot of the point's policy
	pos    []int    // the positions of the policies on the ring
	node   string   // the node whose policies these are; "" for all
}

// members returns the positions of the ring's policies.
func (r *hashRing) members() []int { return r.pos }

// newRing builds the ring of the policies at positions pos of policies,
// those of node ("" for all).
func newRing(policies []Policy, pos []int, node string) *hashRing {
	type point struct {
		hash  uint64
		owner int32
	}
	pts := make([]point, 0, len(pos)*RingPoints)
	var buf []byte
	for _, p := range pos {
		id := policies[p].ID
		for v := range RingPoints {
			buf = append(buf[:0], id...)
			buf = append(buf, '#')
			buf = strconv.AppendInt(buf, int64(v), 10)
			pts = append(pts, point{xxhash.Sum64(buf), int32(p)})
		}
	}
	// Ties (astronomically rare) go to the lower id, so that the ring does
	// not depend on registration order.
	slices.SortFunc(pts, func(a, b point) int {
		switch {
		case a.hash < b.hash:
			return -1
		case a.hash > b.hash:
			return 1
		}
		return compareStrings(policies[a.owner].ID, policies[b.owner].ID)
	})
	r := &hashRing{hashes: make([]uint64, len(pts)), owners: make([]int32, len(pts)), pos: slices.Clone(pos), node: node}
	for i, pt := range pts {
		r.hashes[i], r.owners[i] = pt.hash, pt.owner
	}
	return r
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sessionHash is where a session key lands on a ring.
func sessionHash(key string) uint64 { return xxhash.Sum64String(key) }

// start returns the index of the first point at or after h, wrapping to 0.
func (r *hashRing) start(h uint64) int {
	i, _ := slices.BinarySearch(r.hashes, h)
	if i == len(r.hashes) {
		i = 0
	}
	return i
}

// successor returns the first policy after h on the ring that ok accepts,
// as a position, and whether it is the first policy after h at all (the
// session's natural home). It returns -1 when ok accepts none. Each point
// is visited at most once; a policy ok refused is asked again at its next
// point, so ok must be cheap.
func (r *hashRing) successor(h uint64, ok func(pos int) bool) (pos int, first bool) {
	n := len(r.hashes)
	if n == 0 {
		return -1, false
	}
	i := r.start(h)
	natural := int(r.owners[i])
	for range n {
		p := int(r.owners[i])
		if ok(p) {
			return p, p == natural
		}
		if i++; i == n {
			i = 0
		}
	}
	return -1, false
}

// Owner returns the policy id that a session key's natural home is on the
// ring of every registered policy (ignoring availability and load), and
// false when no policy is registered. It is what the sticky stage starts
// from; tests and tools use it to reason about placement.
func (s *Snapshot) Owner(session string) (string, bool) {
	r := s.rings().all
	if len(r.hashes) == 0 {
		return "", false
	}
	return s.policies[r.owners[r.start(sessionHash(session))]].ID, true
}
