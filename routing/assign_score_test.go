package routing

import (
	"slices"
	"testing"
)

// counts is how many tasks of an assignment each policy index got.
func counts(a Assignment) map[int]int {
	c := map[int]int{}
	for _, i := range a.Indices {
		c[i]++
	}
	return c
}

// A GRPO group assigned in one call stays on one policy while it is within
// the load bound; the next group of the same prompt fills a second one
// (the first is at the bound) rather than every policy's cache; a group of
// another prompt, once the holders are loaded, goes to the least loaded.
func TestAssignPrefixKeepsGroupsTogether(t *testing.T) {
	st := newState(t, Options{}, withCapacity(densePolicies(4), 16), nil)
	h := chain(0, 8)
	a, err := st.Assign(AssignRequest{NumTasks: 8, Prefix: h})
	if err != nil {
		t.Fatal(err)
	}
	first := a.Indices[0]
	if c := counts(a); len(c) != 1 {
		t.Fatalf("group of 8: %v; want one policy", c)
	}
	b, err := st.Assign(AssignRequest{NumTasks: 8, Prefix: h})
	if err != nil {
		t.Fatal(err)
	}
	if c := counts(b); len(c) != 1 || c[first] != 0 {
		t.Fatalf("second group of the prompt: %v; want one policy, not %d (at the bound)", c, first)
	}
	second := b.Indices[0]
	// A third group: both holders are at the bound (a ninth task would put
	// them past it), so the group goes to an idle policy, together.
	c, err := st.Assign(AssignRequest{NumTasks: 8, Prefix: h})
	if err != nil {
		t.Fatal(err)
	}
	if got := counts(c); len(got) != 1 || got[first] != 0 || got[second] != 0 {
		t.Fatalf("third group: %v; want one idle policy", got)
	}
	if s := st.PrefixStats(); s.Decisions[PrefixMiss] != 8 || s.Decisions[PrefixHit]+s.Decisions[PrefixBalanced] != 16 {
		t.Errorf("decisions %v; want 8 misses (the first group) and 16 with a match somewhere", s.Decisions)
	}
}

// A group larger than the bound allows on one policy fills as few as it
// can, and a held prompt draws the group to its holder.
func TestAssignPrefixFillsFewPolicies(t *testing.T) {
	st := newState(t, Options{}, withCapacity(densePolicies(4), 16), nil)
	held := chain(100, 4)
	st.prefix.Add("p2", held)
	a, err := st.Assign(AssignRequest{NumTasks: 20, Prefix: held})
	if err != nil {
		t.Fatal(err)
	}
	c := counts(a)
	if c[2] != 8 || len(c) != 3 {
		t.Fatalf("20 tasks of a prompt p2 holds: %v; want 8 on p2 and the rest on two more", c)
	}
}

// Without hashes the answer is the seed's: the tasks spread.
func TestAssignWithoutPrefixIsTheSeeds(t *testing.T) {
	st := newState(t, Options{}, withCapacity(densePolicies(4), 16), nil)
	a, err := st.Assign(AssignRequest{NumTasks: 8})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := LeastLoaded([]int64{0, 0, 0, 0}, 8)
	if !slices.Equal(a.Indices, want) {
		t.Fatalf("%v; want the seed's %v", a.Indices, want)
	}
}

// Tasks a session homes stay home; the others of the prompt gather.
func TestAssignPrefixLeavesSessionsHome(t *testing.T) {
	sessions := []string{"s", "", "", ""}
	plain, err := newState(t, Options{}, withCapacity(densePolicies(4), 16), nil).Assign(AssignRequest{NumTasks: 4, Sessions: sessions})
	if err != nil {
		t.Fatal(err)
	}
	st := newState(t, Options{}, withCapacity(densePolicies(4), 16), nil)
	a, err := st.Assign(AssignRequest{NumTasks: 4, Sessions: sessions, Prefix: chain(7, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if a.Indices[0] != plain.Indices[0] || !slices.Equal(a.Sticky, plain.Sticky) {
		t.Fatalf("the session's task went to %d (%v), without hashes to %d (%v)", a.Indices[0], a.Sticky, plain.Indices[0], plain.Sticky)
	}
	if c := counts(Assignment{Indices: a.Indices[1:]}); len(c) != 1 {
		t.Fatalf("the three tasks without a session: %v; want one policy", c)
	}
}
