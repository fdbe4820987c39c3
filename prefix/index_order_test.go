package prefix

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// entry is one block of a policy's list in the reference model.
type entry struct {
	h         Hash
	confirmed bool
}

// refRecord is recordLocked written plainly: each block of the chain,
// from the last to the first, becomes the most recent.
func refRecord(list []entry, hashes []Hash, confirmed bool) []entry {
	for i := len(hashes) - 1; i >= 0; i-- {
		e := entry{h: hashes[i]}
		if k := slices.IndexFunc(list, func(o entry) bool { return o.h == hashes[i] }); k >= 0 {
			e = list[k]
			list = slices.Delete(list, k, k+1)
		}
		e.confirmed = e.confirmed || confirmed
		list = slices.Insert(list, 0, e)
	}
	return list
}

// listOf is policy id's list in the Index, the most recent first.
func listOf(x *Index, id string) []entry {
	var out []entry
	for n := x.pols[x.slots[id]].head; n != none; n = x.nodes[n].next {
		out = append(out, entry{h: x.blocks[x.nodes[n].blk].hash, confirmed: x.nodes[n].confirmed})
	}
	return out
}

// The list order after any sequence of records is that of moving every
// block of each chain to the front, last block first, whatever part of
// the chain headed the list already, and with hashes a chain repeats.
func TestIndexRecordOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for round := range 300 {
		x := NewIndex(Options{Stride: 1, DefaultTokens: 1 << 20})
		ids := []string{"a", "b"}
		ref := map[string][]entry{}
		var prev []Hash
		for step := range 40 {
			var hashes []Hash
			switch r.IntN(4) {
			case 0: // the last chain again, or extended: a next turn
				hashes = append(slices.Clone(prev), Hash(r.IntN(12)))
			case 1: // a prefix of it
				hashes = slices.Clone(prev[:r.IntN(len(prev)+1)])
			default: // any, over few hashes: overlaps and repeats
				for range r.IntN(8) {
					hashes = append(hashes, Hash(r.IntN(12)))
				}
			}
			prev = hashes
			id := ids[r.IntN(len(ids))]
			switch r.IntN(3) {
			case 0:
				x.RecordPending(id, hashes)
				ref[id] = refRecord(ref[id], hashes, false)
			case 1:
				x.Add(id, hashes)
				ref[id] = refRecord(ref[id], hashes, true)
			default:
				x.Confirm(id, hashes, -1)
				ref[id] = refRecord(ref[id], hashes, true)
			}
			got := listOf(x, id)
			if !slices.Equal(got, ref[id]) {
				t.Fatalf("round %d step %d: after recording %v on %s:\n got %v\nwant %v", round, step, hashes, id, got, ref[id])
			}
			pending := 0
			for _, e := range got {
				if !e.confirmed {
					pending++
				}
			}
			if p := x.pols[x.slots[id]]; p.blocks != len(got) || p.pending != pending {
				t.Fatalf("round %d step %d: %s counts %d blocks, %d pending; its list %d, %d", round, step, id, p.blocks, p.pending, len(got), pending)
			}
			for _, n := range x.nodes {
				if n.inRun {
					t.Fatalf("round %d step %d: a node left marked in a run", round, step)
				}
			}
		}
	}
}

// Match by the blocks' masks (up to 64 policy slots) and by walking the
// holders (beyond) both answer as a plain reading of each policy's list:
// the longest prefix of the chain it holds, and holds confirmed.
func TestIndexMatchAgainstLists(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, np := range []int{3, 64, 70} {
		x := NewIndex(Options{Stride: 1, DefaultTokens: 40 * BlockTokens})
		ids := make([]string, np)
		for i := range ids {
			ids[i] = "p" + string(rune('A'+i%26)) + string(rune('a'+i/26))
		}
		chains := func() []Hash {
			var hs []Hash
			for range r.IntN(12) {
				hs = append(hs, Hash(r.IntN(16)))
			}
			return hs
		}
		for step := range 3000 {
			id := ids[r.IntN(np)]
			switch hs := chains(); r.IntN(6) {
			case 0, 1:
				x.RecordPending(id, hs)
			case 2:
				x.Add(id, hs)
			case 3:
				x.Confirm(id, hs, r.IntN(3)*BlockTokens-1)
			case 4:
				x.DropPending(id, hs)
			default:
				if r.IntN(4) == 0 {
					x.Remove(id)
				}
			}
			hs := chains()
			got := x.Match(hs, ids, nil)
			for i, id := range ids {
				var want Match
				if _, ok := x.slots[id]; ok {
					held := map[Hash]bool{}
					for _, e := range listOf(x, id) {
						held[e.h] = held[e.h] || e.confirmed
					}
					for want.Pending < len(hs) {
						if _, ok := held[hs[want.Pending]]; !ok {
							break
						}
						want.Pending++
					}
					for want.Confirmed < len(hs) && held[hs[want.Confirmed]] {
						want.Confirmed++
					}
				}
				if got[i] != want {
					t.Fatalf("%d policies, step %d: Match(%v) of %s = %+v, its list says %+v", np, step, hs, id, got[i], want)
				}
			}
		}
	}
}
