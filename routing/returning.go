package routing

import (
	"sync"
	"time"
)

// returns records the policies the router itself took out of routing
// and expects back by a deadline: those a fleet verb put to sleep
// (POST /fleet/sleep, with its resume_within_ms). A proxied generation
// that such a policy aborted may wait for it to return instead of ending
// with the tokens so far (the proxy's Leaser.Returning). Its zero value
// records nothing.
type returns struct {
	mu    sync.Mutex
	until map[string]time.Time // policy id → when it is due back
}

// ExpectReturn records that the policies with the given ids were taken
// out of routing by the router itself and are due back by until; a zero
// until forgets them (they came back, or will not). Ids are not checked:
// a record of an id that is not registered is never asked for.
func (st *State) ExpectReturn(until time.Time, ids ...string) {
	r := &st.returns
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if until.IsZero() {
			delete(r.until, id)
			continue
		}
		if r.until == nil {
			r.until = make(map[string]time.Time)
		}
		r.until[id] = until
	}
}

// Returning reports whether the policy with the given id is one the
// router took out of routing and expects back (ExpectReturn), and by
// when: not once now is past that.
func (st *State) Returning(id string, now time.Time) (until time.Time, ok bool) {
	r := &st.returns
	r.mu.Lock()
	defer r.mu.Unlock()
	until, ok = r.until[id]
	if !ok || !now.Before(until) {
		return time.Time{}, false
	}
	return until, true
}
