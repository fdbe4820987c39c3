package routing

import (
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/internal/fakeclock"
)

// Tracked tasks that /complete never reports leave their policy's load at
// their TTL; completed ones are taken from the oldest batch first, so an
// expiry never takes a task twice.
func TestAssignTasksExpire(t *testing.T) {
	clock := fakeclock.New()
	start := clock.Now()
	st := newState(t, Options{Now: clock.Now, AssignTTL: time.Minute}, densePolicies(1), Topology{})
	if _, err := st.Assign(AssignRequest{NumTasks: 3}); err != nil { // batch A: 3 tasks, default TTL
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second)
	if _, err := st.Assign(AssignRequest{NumTasks: 2, TTL: 2 * time.Minute}); err != nil { // batch B: 2 tasks
		t.Fatal(err)
	}
	if _, err := st.Complete(0, 2); err != nil { // two of A
		t.Fatal(err)
	}
	stats := st.Stats()
	if got := stats.Policies[0].Load; got != 3 {
		t.Fatalf("load %d; want 3", got)
	}
	if stats.OldestTask != 10*time.Second {
		t.Errorf("oldest task %v; want 10s (batch A)", stats.OldestTask)
	}
	expire := func(at time.Duration) {
		st.mu.Lock()
		st.expireBatchesLocked(start.Add(at))
		st.mu.Unlock()
	}
	expire(time.Minute) // A's last task
	if got := policyStats(t, st, 0); got.Load != 2 || got.ExpiredTasks != 1 {
		t.Fatalf("after A's TTL: load %d, expired %d; want 2, 1", got.Load, got.ExpiredTasks)
	}
	if _, err := st.Complete(0, 1); err != nil { // one of B
		t.Fatal(err)
	}
	expire(10*time.Second + 2*time.Minute) // B's last task
	if got := policyStats(t, st, 0); got.Load != 0 || got.ExpiredTasks != 2 {
		t.Fatalf("after B's TTL: load %d, expired %d; want 0, 2", got.Load, got.ExpiredTasks)
	}
	if got := st.Stats().OldestTask; got != 0 {
		t.Errorf("oldest task %v with none left; want 0", got)
	}
}

// The timer fires by itself: a task assigned with a short TTL leaves the
// load without anyone asking.
func TestAssignTasksExpireOnTheirOwn(t *testing.T) {
	st := newState(t, Options{}, densePolicies(2), Topology{})
	if _, err := st.Assign(AssignRequest{NumTasks: 4, TTL: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for policyStats(t, st, 0).Load+policyStats(t, st, 1).Load != 0 {
		if time.Now().After(deadline) {
			t.Fatal("tasks never expired")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Without a TTL tasks count until completed, and the oldest lease's age is
// reported.
func TestOldestLeaseAge(t *testing.T) {
	clock := fakeclock.New()
	st := newState(t, Options{Now: clock.Now}, densePolicies(2), Topology{})
	mustSelect(t, st, SelectIdle, "")
	clock.Advance(3 * time.Second)
	mustSelect(t, st, SelectIdle, "")
	clock.Advance(time.Second)
	if _, err := st.Assign(AssignRequest{NumTasks: 2}); err != nil {
		t.Fatal(err)
	}
	stats := st.Stats()
	if stats.OldestLease != 4*time.Second || stats.OldestTask != 0 {
		t.Errorf("oldest lease %v, task %v; want 4s, 0 (no TTL: not tracked)", stats.OldestLease, stats.OldestTask)
	}
}
