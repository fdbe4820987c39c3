package routing

import (
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// RingPoints is how many virtual points each policy has on a sticky ring.
// More points spread the sessions more evenly: with 128 a policy's share
// of the keys deviates from the mean by about 1/√128 ≈ 9%, and the ring of
// 1,024 policies takes 1 MB.
const RingPoints = 128

// A hashRing is a consistent-hashing ring over some of a snapshot's
// policies: RingPoints points per policy, hashed with xxhash (stable
// across processes and replicas, unlike hash/maphash) from the policy's
// URL, the server that holds the sessions' caches: a policy removed and
// registered again at the same URL, under a new id, keeps its sessions. A
// session key hashes onto the ring and is served by its successors in ring
// order. Each point is one uint64: the hash's top 44 bits, then the
// position of its policy in the low 20 (positions are below MaxIndex =
// 2^20), so that the ring sorts as plain integers and ties, which need two
// points in 2^44 to meet, go to the lower position. Rings are built once
// per snapshot and are immutable.
type hashRing struct {
	points []uint64 // ascending
	pos    []int    // the positions of the policies on the ring
	node   string   // the node whose policies these are; "" for all
}

// posBits low bits of a point hold its policy's position.
const (
	posBits = 20
	posMask = 1<<posBits - 1
)

// owner returns the position of the policy of point i.
func (r *hashRing) owner(i int) int { return int(r.points[i] & posMask) }

// members returns the positions of the ring's policies.
func (r *hashRing) members() []int { return r.pos }

// newRing builds the ring of the policies at positions pos of policies,
// those of node ("" for all).
func newRing(policies []Policy, pos []int, node string) *hashRing {
	r := &hashRing{points: make([]uint64, 0, len(pos)*RingPoints), pos: slices.Clone(pos), node: node}
	var buf []byte
	for _, p := range pos {
		key := ringKey(policies[p])
		for v := range RingPoints {
			buf = append(buf[:0], key...)
			buf = append(buf, '#')
			buf = strconv.AppendInt(buf, int64(v), 10)
			r.points = append(r.points, xxhash.Sum64(buf)&^posMask|uint64(p))
		}
	}
	slices.Sort(r.points)
	return r
}

// ringKey is what a policy's ring points are hashed from: its URL, or its
// id when it has none.
func ringKey(p Policy) string {
	if p.URL != "" {
		return p.URL
	}
	return p.ID
}

// split returns the rings of each node's policies, nodeOf giving a
// position's node ("" for none, on no node's ring): the points of r that
// are theirs, in r's order, which is the order a ring built from them
// alone would have, in one pass and without sorting again.
func (r *hashRing) split(nodeOf func(pos int) string) map[string]*hashRing {
	out := make(map[string]*hashRing)
	for _, p := range r.pos {
		n := nodeOf(p)
		if n == "" {
			continue
		}
		s := out[n]
		if s == nil {
			s = &hashRing{node: n}
			out[n] = s
		}
		s.pos = append(s.pos, p)
	}
	for _, s := range out {
		s.points = make([]uint64, 0, len(s.pos)*RingPoints)
	}
	for i, pt := range r.points {
		if s := out[nodeOf(r.owner(i))]; s != nil {
			s.points = append(s.points, pt)
		}
	}
	return out
}

// sessionHash is where a session key lands on a ring.
func sessionHash(key string) uint64 { return xxhash.Sum64String(key) }

// start returns the index of the first point at or after h, wrapping to 0.
func (r *hashRing) start(h uint64) int {
	i, _ := slices.BinarySearch(r.points, h&^posMask)
	if i == len(r.points) {
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
	n := len(r.points)
	if n == 0 {
		return -1, false
	}
	i := r.start(h)
	natural := r.owner(i)
	for range n {
		p := r.owner(i)
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
	if len(r.points) == 0 {
		return "", false
	}
	return s.policies[r.owner(r.start(sessionHash(session)))].ID, true
}
