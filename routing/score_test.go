package routing

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"
)

// testScorer rates p3 for requests that name no route, and p1 for those
// that name /generate: a stage that is one type and one line in scorers.
type testScorer struct{}

func (testScorer) Rate(q Query, c Candidate) int {
	switch {
	case q.Route() == "" && c.Policy().Index == 3:
		return 1
	case q.Route() == "/generate" && c.Policy().Index == 1:
		return 1
	}
	return 0
}

// withScorer installs s in the score stage for the test.
func withScorer(t *testing.T, s Scorer) {
	saved := scorers
	scorers = append(slices.Clip(scorers), s)
	t.Cleanup(func() { scorers = saved })
}

// Every decision obeys a scorer: /select, the hand-off of a freed slot to
// the waiters, and /assign; a request it has no opinion of is the
// router's alone.
func TestScoreStage(t *testing.T) {
	withScorer(t, testScorer{})

	t.Run("select", func(t *testing.T) {
		st := newState(t, Options{}, withCapacity(densePolicies(4), 4), Topology{})
		for _, r := range []Selector{SelectIdle, SelectIdleAffinity} {
			if d := mustSelect(t, st, r, ""); d.Policy.ID != "p3" {
				t.Errorf("Select(%T) = %s; the scorer rates p3", r, d.Policy.ID)
			}
			d, err := st.Select(cancelled(), SelectRequest{Router: r, Route: "/generate"})
			if err != nil || d.Policy.ID != "p1" {
				t.Errorf("Select(%T, /generate) = %s, %v; the scorer rates p1 for it", r, d.Policy.ID, err)
			}
		}
	})

	t.Run("load bound", func(t *testing.T) {
		st := newState(t, Options{}, withCapacity(densePolicies(4), 4), Topology{})
		got := map[string]int{}
		for range 8 {
			got[mustSelect(t, st, SelectIdle, "").Policy.ID]++
		}
		// p3 takes requests while its load is within half its capacity of
		// the least loaded one's: 3 alone, then one to each of the others,
		// then its last slot, then the others in the router's order.
		want := map[string]int{"p3": 4, "p0": 2, "p1": 1, "p2": 1}
		if !maps.Equal(got, want) {
			t.Errorf("requests per policy %v; want %v", got, want)
		}
	})

	t.Run("waiters", func(t *testing.T) {
		st := newState(t, Options{}, withCapacity(densePolicies(2), 1), Topology{})
		busy0, busy1 := leaseBoth(t, st)
		type result struct {
			name string
			d    Decision
		}
		got := make(chan result, 2)
		wait := func(name, route string, n int) {
			go func() {
				d, err := st.Select(context.Background(), SelectRequest{Router: SelectIdle, Wait: time.Hour, Route: route})
				if err != nil {
					t.Error(err)
				}
				got <- result{name, d}
			}()
			waitForWaiters(t, st, n)
		}
		wait("plain", "", 1)             // the longest waiter: no rating of p1
		wait("generate", "/generate", 2) // rates p1
		mustRelease(t, st, busy1.Lease)
		if r := <-got; r.name != "generate" || r.d.Policy.ID != "p1" {
			t.Fatalf("p1's freed slot went to the %s waiter (%s); want the one that rates p1 to go ahead", r.name, r.d.Policy.ID)
		}
		mustRelease(t, st, busy0.Lease)
		if r := <-got; r.name != "plain" {
			t.Fatalf("p0's freed slot went to the %s waiter", r.name)
		}
	})

	t.Run("assign", func(t *testing.T) {
		st := newState(t, Options{}, withCapacity(densePolicies(4), 16), Topology{})
		a, err := st.Assign(AssignRequest{NumTasks: 4})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.Indices, []int{3, 3, 3, 3}) {
			t.Errorf("Assign = %v; the scorer rates p3", a.Indices)
		}
	})
}

// A scorer with no opinion of a request leaves every decision to the
// router: the seed's answers.
func TestScoreStageNoOpinion(t *testing.T) {
	withScorer(t, testScorer{})
	st := newState(t, Options{}, withCapacity(densePolicies(3), 4), Topology{}) // no p3
	a, err := st.Assign(AssignRequest{NumTasks: 6})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := LeastLoaded([]int64{0, 0, 0}, 6)
	if !slices.Equal(a.Indices, want) {
		t.Errorf("Assign = %v; want the seed's %v", a.Indices, want)
	}
	var order []string
	for range 3 {
		order = append(order, mustSelect(t, st, SelectIdle, "").Policy.ID)
	}
	if !slices.Equal(order, []string{"p0", "p1", "p2"}) {
		t.Errorf("Select order %v; want the seed's deque order p0, p1, p2", order)
	}
}
