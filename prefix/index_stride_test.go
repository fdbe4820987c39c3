package prefix

import (
	"math/rand/v2"
	"testing"
)

// An Index of steps answers what an Index of blocks answers, rounded down
// to whole steps, over random records, confirms and adds of chains that
// share prefixes of every length (no budget reached).
func TestIndexStrideAgainstBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	blocks := NewIndex(Options{Stride: 1})
	steps := NewIndex(Options{})
	k := DefaultStride
	roots := [][]Hash{chain(0, 40), chain(10000, 40), chain(20000, 40)}
	ids := []string{"a", "b", "c"}
	for op := range 4000 {
		hs := roots[rng.IntN(len(roots))]
		hs = hs[:rng.IntN(len(hs)+1)]
		id := ids[rng.IntN(len(ids))]
		switch rng.IntN(3) {
		case 0:
			blocks.RecordPending(id, hs)
			steps.RecordPending(id, hs)
		case 1:
			blocks.Confirm(id, hs, -1)
			steps.Confirm(id, hs, -1)
		default:
			blocks.Add(id, hs)
			steps.Add(id, hs)
		}
		q := roots[rng.IntN(len(roots))]
		q = q[:rng.IntN(len(q)+1)]
		mb, ms := blocks.Match(q, ids, nil), steps.Match(q, ids, nil)
		for i := range ids {
			want := Match{Confirmed: mb[i].Confirmed / k * k, Pending: mb[i].Pending / k * k}
			if ms[i] != want {
				t.Fatalf("op %d, policy %s, %d blocks asked: steps say %+v, blocks %+v", op, ids[i], len(q), ms[i], mb[i])
			}
		}
	}
}

// An engine's count of cached tokens cuts an Index of steps back in whole
// steps, allowing one block short as by blocks; its figures are in blocks
// and tokens.
func TestIndexStrideConfirmAndStats(t *testing.T) {
	a := chain(0, 12) // 3 steps
	for _, tt := range []struct {
		name   string
		cached int
		want   int // blocks of other kept
	}{
		{"the last token computed again", 12*BlockTokens - 1, 8},
		{"one step short", 8*BlockTokens + 3, 4},
		{"flushed", 3, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			x := NewIndex(Options{})
			other := chain(5000, 8)
			x.Add("p", other)
			x.Add("p", a[:12])
			x.RecordPending("p", a)
			x.Confirm("p", a, tt.cached)
			if got := match(x, a, "p"); got != (Match{12, 12}) {
				t.Errorf("the chain after its answer: %+v, want 12 blocks confirmed", got)
			}
			if got := match(x, other, "p"); got.Confirmed != tt.want {
				t.Errorf("the other chain: %+v, want %d blocks", got, tt.want)
			}
		})
	}
	x := NewIndex(Options{DefaultTokens: 8 * BlockTokens})
	x.RecordPending("p", chain(0, 11)) // 2 steps; 3 blocks fill none
	st := x.Stats()
	if p := st.Policies[0]; p.IndexedTokens != 8*BlockTokens || p.PendingTokens != 8*BlockTokens || p.CapacityTokens != 8*BlockTokens {
		t.Errorf("policy stats %+v; want 8 blocks' tokens indexed, pending and of capacity", p)
	}
	if st.Blocks != 8 || st.Entries != 8 {
		t.Errorf("stats %+v; want 8 blocks and entries", st)
	}
	x.RecordPending("p", chain(100, 4))
	if p := x.Stats().Policies[0]; p.IndexedTokens != 8*BlockTokens || p.Evictions != 4 {
		t.Errorf("after one more step: %+v; want the budget of 8 blocks kept and 4 blocks evicted", p)
	}
}
