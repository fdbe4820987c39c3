package routing

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// ByIndex answers the same whether the snapshot keeps its index table as a
// slice (compact indices) or as a map (sparse ones), for every index in and
// around the registered range.
func TestByIndexCompactAndSparse(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for round := range 200 {
		n := 1 + rng.IntN(40)
		spread := []int{n, 2 * n, 3 * n, 100 * n, MaxIndex}[round%5]
		want := map[int]int{}
		var ps []Policy
		for len(ps) < n {
			idx := rng.IntN(min(spread, MaxIndex))
			if _, dup := want[idx]; dup {
				continue
			}
			want[idx] = -1
			ps = append(ps, Policy{Index: idx, ID: "p" + strconv.Itoa(idx), URL: "http://h/" + strconv.Itoa(idx)})
		}
		snap, err := newSnapshot(ps, nil)
		if err != nil {
			t.Fatal(err)
		}
		for pos, p := range snap.Policies() {
			want[p.Index] = pos
		}
		check := func(idx int) {
			pos, ok := snap.ByIndex(idx)
			wpos, wok := want[idx]
			if ok != wok || (ok && pos != wpos) {
				t.Fatalf("round %d (compact table: %v): ByIndex(%d) = %d, %v; want %d, %v", round, snap.dense != nil, idx, pos, ok, wpos, wok)
			}
		}
		for idx := -3; idx < min(spread, MaxIndex)+70 && idx < 4000; idx++ {
			check(idx)
		}
		for idx := range want {
			check(idx)
		}
		check(MaxIndex)
		check(-1 << 40)
	}
}
