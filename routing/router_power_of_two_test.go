package routing

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// seededTwo is power_of_two with a seeded source.
func seededTwo(seed uint64) *powerOfTwo {
	r := rand.New(rand.NewPCG(seed, 7))
	return &powerOfTwo{intN: r.IntN}
}

// Of the two drawn, the less loaded wins: with two candidates that is
// always the less loaded one, ties to the lower index.
func TestPowerOfTwoAssignTakesTheLessLoaded(t *testing.T) {
	for seed := range uint64(20) {
		got, err := seededTwo(seed).assign(AffinityInput{Loads: []int64{5, 2}}, 3, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Loads 5 and 2: policy 1 stays the less loaded for three tasks.
		if want := ints(1, 1, 1); !slices.Equal(got, want) {
			t.Fatalf("seed %d: %v; want %v", seed, got, want)
		}
	}
	if _, err := (&powerOfTwo{}).assign(AffinityInput{}, 1, nil); err != ErrNoPolicies {
		t.Errorf("no candidates: %v; want ErrNoPolicies", err)
	}
}

// scriptedTwo is power_of_two drawing the given positions in order.
func scriptedTwo(tb testing.TB, draws ...int) *powerOfTwo {
	return &powerOfTwo{intN: func(n int) int {
		tb.Helper()
		if len(draws) == 0 {
			tb.Fatal("more draws than scripted")
		}
		d := draws[0]
		draws = draws[1:]
		if d >= n {
			tb.Fatalf("scripted draw %d out of [0, %d)", d, n)
		}
		return d
	}}
}

// A tie between the two drawn goes to the lower index, whichever of them
// was drawn first (two draws a, then b from the n-1 others, shifted past a).
func TestPowerOfTwoAssignTieGoesToTheLowerIndex(t *testing.T) {
	for _, tc := range []struct {
		name  string
		loads []int64
		draws []int
		want  int
	}{
		{"lower drawn first", []int64{4, 4}, []int{0, 0}, 0},  // a=0, b=1
		{"higher drawn first", []int64{4, 4}, []int{1, 0}, 0}, // a=1, b=0
		{"tie above the least loaded", []int64{0, 3, 3}, []int{2, 1}, 1},
		{"tie above the least loaded, lower first", []int64{0, 3, 3}, []int{1, 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := scriptedTwo(t, tc.draws...).assign(AffinityInput{Loads: tc.loads}, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := ints(tc.want); !slices.Equal(got, want) {
				t.Errorf("loads %v, draws %v: %v; want %v", tc.loads, tc.draws, got, want)
			}
		})
	}
}

// Over many tasks it spreads load: no policy ends more than a few tasks
// above the mean (the power of two choices keeps the maximum load at
// mean + O(log log n)).
func TestPowerOfTwoAssignSpreads(t *testing.T) {
	const n, tasks = 64, 64 * 50
	got, err := seededTwo(1).assign(AffinityInput{Loads: make([]int64, n)}, tasks, nil)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, n)
	for _, p := range got {
		counts[p]++
	}
	if hi, lo := slices.Max(counts), slices.Min(counts); hi-lo > 6 {
		t.Errorf("spread of %d tasks over %d policies: max %d, min %d; want within 6", tasks, n, hi, lo)
	}
}

// /select: only idle policies meeting the floor are drawn, the less loaded
// of two wins, and nothing idle means waiting.
func TestPowerOfTwoSelect(t *testing.T) {
	st := newState(t, Options{}, withCapacity(densePolicies(2), 3), Topology{})
	p2 := seededTwo(3)
	// The deque hands out slots in rounds: 0, 1, 0. Policy 0 holds 2.
	selectIndices(t, st, SelectIdle, "", "", "")
	if got := mustSelect(t, st, p2, ""); got.Policy.Index != 1 {
		t.Fatalf("policy %d; want 1, the less loaded", got.Policy.Index)
	}
	// Each holds 2 of 3: the tie goes to index 0, then 1 is the only one.
	if got := selectIndices(t, st, p2, "", ""); !slices.Equal(got, ints(0, 1)) {
		t.Fatalf("tie, then the last idle slot: %v; want [0 1]", got)
	}
	wantNoIdle(t, st, p2, "")

	// A floor leaves stale policies out.
	st2 := newState(t, Options{}, versioned(1, 2), Topology{})
	floor := int64(2)
	for range 5 {
		d, err := st2.Select(cancelled(), SelectRequest{Router: p2, MinVersion: &floor})
		if err != nil || d.Policy.Index != 1 {
			t.Fatalf("with floor 2: %d, %v; want policy 1", d.Policy.Index, err)
		}
		mustRelease(t, st2, d.Lease)
	}
}
