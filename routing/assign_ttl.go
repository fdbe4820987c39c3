package routing

import (
	"container/heap"
	"slices"
	"time"
)

// Tracked /assign tasks expire like leases. A caller that never calls
// /complete would otherwise hold load on its policies forever, and a
// rolling update would wait its whole drain timeout on each of them. Each
// tracked assignment records, per policy it placed tasks on, a batch that
// ends its TTL after the assignment: what /complete has not taken of it
// by then is taken off the policy's load. /complete takes from a
// policy's oldest batches first.

// assignBatch is the tasks one tracked /assign placed on one policy.
type assignBatch struct {
	rt       *policyRuntime
	n        int64 // tasks neither completed nor expired
	at       time.Time
	deadline time.Time
}

// batchHeap orders batches by deadline.
type batchHeap []*assignBatch

func (h batchHeap) Len() int           { return len(h) }
func (h batchHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h batchHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *batchHeap) Push(x any)        { *h = append(*h, x.(*assignBatch)) }
func (h *batchHeap) Pop() any {
	old := *h
	b := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return b
}

// addBatchLocked records n tasks just assigned to rt, expiring after ttl
// (never when ttl is 0: nothing is recorded). Caller must hold mu.
func (st *State) addBatchLocked(rt *policyRuntime, n int64, ttl time.Duration) {
	if ttl <= 0 || n <= 0 {
		return
	}
	now := st.opts.Now()
	b := &assignBatch{rt: rt, n: n, at: now, deadline: now.Add(ttl)}
	rt.batches = append(rt.batches, b)
	heap.Push(&st.batches, b)
	if st.batches[0] == b {
		st.armBatchTimerLocked(now)
	}
}

// completeBatchesLocked takes count completed tasks from rt's oldest
// batches. Caller must hold mu.
func completeBatchesLocked(rt *policyRuntime, count int64) {
	for count > 0 && len(rt.batches) > 0 {
		b := rt.batches[0]
		take := min(count, b.n)
		b.n -= take
		count -= take
		if b.n == 0 {
			rt.batches = rt.batches[1:]
		}
	}
}

// armBatchTimerLocked sets the timer to the earliest deadline. Caller must
// hold mu.
func (st *State) armBatchTimerLocked(now time.Time) {
	if len(st.batches) == 0 {
		return
	}
	d := max(st.batches[0].deadline.Sub(now), 0)
	if st.batchTimer == nil {
		st.batchTimer = time.AfterFunc(d, st.expireBatches)
	} else {
		st.batchTimer.Reset(d)
	}
}

// expireBatches takes the expired batches' tasks off their policies'
// loads.
func (st *State) expireBatches() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.expireBatchesLocked(st.opts.Now())
}

// expireBatchesLocked expires the batches whose deadline is not after now
// and arms the timer for the next. Caller must hold mu.
func (st *State) expireBatchesLocked(now time.Time) {
	for len(st.batches) > 0 && !st.batches[0].deadline.After(now) {
		b := heap.Pop(&st.batches).(*assignBatch)
		if b.n == 0 || b.rt.removed {
			continue
		}
		rt := b.rt
		rt.load = max(rt.load-b.n, 0)
		rt.expiredTasks.Add(uint64(b.n))
		b.n = 0
		if i := slices.Index(rt.batches, b); i >= 0 {
			rt.batches = slices.Delete(rt.batches, i, i+1)
		}
	}
	st.armBatchTimerLocked(now)
}

// oldestAgesLocked returns the age of the oldest lease out and of the
// oldest tracked task neither completed nor expired (of those assigned
// with a TTL), and whether there is one. Caller must hold mu.
func (st *State) oldestAgesLocked(now time.Time) (lease, task time.Duration, anyLease, anyTask bool) {
	for _, s := range st.leases {
		if age := now.Sub(s.leasedAt); !anyLease || age > lease {
			lease, anyLease = age, true
		}
	}
	for _, rt := range st.ledger.snap.rts {
		if len(rt.batches) == 0 {
			continue
		}
		if age := now.Sub(rt.batches[0].at); !anyTask || age > task {
			task, anyTask = age, true
		}
	}
	return lease, task, anyLease, anyTask
}
