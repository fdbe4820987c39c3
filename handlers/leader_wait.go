package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/proxy"
	"github.com/policyrouter/policyrouter/routing"
)

// Fail-over is a wait. Of several replicas one leads; from the end of a
// leader's term to the next election (a killed leader's session lasts a
// leader ttl) none can route. A routing request that finds no leader
// waits for one, within the wait it asked for a policy (timeout_ms of
// /select, X-Select-Timeout-MS, else the default select wait), and then
// goes on as it would have: served here when this replica was elected,
// else proxied under the new leader's lease, or told the new leader's
// address (/select and /assign, which followers do not forward). It is
// answered not_leader only when its wait runs out first; overloaded when
// more than MaxLeaderWaiters wait already; store_unavailable at once when
// no leader can be elected (the store does not answer). Waking is grpc's:
// a channel closed at each change of leadership (LeaderChanged), no
// polling.

// leaderWatch wakes the requests waiting for a leader.
type leaderWatch struct {
	mu sync.Mutex
	// changed is done (its Done channel closed) at the next change of
	// leadership; nil while nobody waits. Guarded by mu.
	changed context.Context
	cancel  context.CancelFunc
	// waiting counts the requests waiting for a leader.
	waiting atomic.Int64
}

// next returns a context done at the next change of leadership. Take it
// before reading the leadership, so that no change is missed between.
func (lw *leaderWatch) next() context.Context {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.changed == nil {
		lw.changed, lw.cancel = context.WithCancel(context.Background())
	}
	return lw.changed
}

// wake wakes every request waiting for a leader.
func (lw *leaderWatch) wake() {
	lw.mu.Lock()
	if lw.changed != nil {
		lw.cancel()
		lw.changed, lw.cancel = nil, nil
	}
	lw.mu.Unlock()
}

// awaitLeader waits until this replica leads, or knows a leader other
// than unlike (one that just failed to answer; "" for none), and returns
// which. It fails, without waiting, with ctx's error when the caller
// left; overloaded beyond MaxLeaderWaiters; store_unavailable when
// Config.Election says no leader can be elected; and, once it waited,
// not_leader at deadline, shutting_down when the server stops.
func (s *Server) awaitLeader(ctx context.Context, deadline time.Time, unlike string) (leading bool, leader string, err error) {
	found := func() bool {
		leading, leader = s.Leader()
		return leading || leader != "" && leader != unlike && leader != s.self()
	}
	if found() {
		return leading, leader, nil
	}
	wait := time.Until(deadline)
	if wait <= 0 {
		return false, leader, s.noLeader()
	}
	if n := s.leaderWatch.waiting.Add(1); n > int64(s.MaxLeaderWaiters) {
		s.leaderWatch.waiting.Add(-1)
		return false, leader, errorf(api.CodeOverloaded, "no leader elected, and too many requests wait for one already (--max-waiters): retry later")
	}
	defer s.leaderWatch.waiting.Add(-1)
	if s.Election != nil {
		if err := s.Election(ctx); err != nil {
			return false, leader, err
		}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		changed := s.leaderWatch.next()
		if found() {
			return leading, leader, nil
		}
		select {
		case <-changed.Done():
		case <-timer.C:
			return false, leader, s.noLeader()
		case <-ctx.Done():
			return false, leader, ctx.Err()
		case <-s.stopping.Done():
			return false, leader, asError(routing.ErrShuttingDown)
		}
	}
}

// self is this replica's advertise URL, when it proxies as a follower
// (Config.Replica); else "". The election can name it leader a moment
// before its term begins (or after it ended): it is no leader to send to
// then, but one to wait for.
func (s *Server) self() string {
	if s.leases == nil {
		return ""
	}
	return s.leases.cfg.Holder()
}

// awaitChange waits for the next change of leadership, at most until
// deadline, and reports whether this replica leads then.
func (s *Server) awaitChange(ctx context.Context, deadline time.Time) bool {
	changed := s.leaderWatch.next()
	if leading, _ := s.Leader(); leading || !time.Now().Before(deadline) {
		return leading
	}
	if n := s.leaderWatch.waiting.Add(1); n > int64(s.MaxLeaderWaiters) {
		s.leaderWatch.waiting.Add(-1)
		return false
	}
	defer s.leaderWatch.waiting.Add(-1)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-changed.Done():
	case <-timer.C:
	case <-ctx.Done():
	case <-s.stopping.Done():
	}
	leading, _ := s.Leader()
	return leading
}

// noLeader is the not_leader of a wait for a leader that ran out.
func (s *Server) noLeader() *Error {
	return errorf(api.CodeNotLeader, "no leader was elected within the request's wait; retry, or try another replica")
}

// LeaderWaiters returns how many requests wait for a leader now.
func (s *Server) LeaderWaiters() int { return int(s.leaderWatch.waiting.Load()) }

// leaderWaitKey is the context key of the time a request spent waiting
// for a leader before it was served here.
type leaderWaitKey struct{}

// leaderWaited returns how long the request waited for a leader (routed)
// before this replica, newly elected, served it: the wait it asked for
// is that much shorter.
func leaderWaited(ctx context.Context) time.Duration {
	d, _ := ctx.Value(leaderWaitKey{}).(time.Duration)
	return d
}

// waitOf is how long a request may wait for a leader: its wait for a
// policy.
type waitOf func(s *Server, r *http.Request) time.Duration

// selectWait is /select's wait: timeout_ms, else the default select wait,
// capped by MaxSelectWait. The body is read here only on a replica that
// knows no leader, and put back for the handler; one that does not parse
// does not wait (the handler answers it).
func selectWait(s *Server, r *http.Request) time.Duration {
	b, err := io.ReadAll(io.LimitReader(r.Body, s.MaxBodyBytes+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
	if err != nil {
		return 0
	}
	var req struct {
		TimeoutMS *int `json:"timeout_ms"`
	}
	if json.Unmarshal(b, &req) != nil {
		return 0
	}
	if req.TimeoutMS == nil {
		return s.DefaultSelectWait
	}
	return min(time.Duration(max(*req.TimeoutMS, 0))*time.Millisecond, s.MaxSelectWait)
}

// headerWait is the wait of requests that carry it in
// X-Select-Timeout-MS (proxied requests, /assign), else the default
// select wait, capped by MaxSelectWait. A malformed header does not wait.
func headerWait(s *Server, r *http.Request) time.Duration {
	return headerWaitOr(s, r, s.DefaultSelectWait)
}

// askedWait is the wait of requests that do not wait for a policy
// (/release, /complete): only what X-Select-Timeout-MS asks.
func askedWait(s *Server, r *http.Request) time.Duration {
	return headerWaitOr(s, r, 0)
}

func headerWaitOr(s *Server, r *http.Request, def time.Duration) time.Duration {
	v := r.Header.Get(proxy.HeaderSelectTimeoutMS)
	if v == "" {
		return def
	}
	ms, err := strconv.Atoi(v)
	if err != nil || ms < 0 {
		return 0
	}
	return min(time.Duration(ms)*time.Millisecond, s.MaxSelectWait)
}

// awaitLeaderFor is the routing endpoints' leader middleware: on a
// replica that leads, the request goes on; on one that knows another
// leader, it is answered not_leader naming it, as leaderOnly does; on one
// that knows none (or only itself, its term not begun), it waits for a
// leader for at most wait's figure, and
// then either goes on (this replica was elected; what it waited is taken
// from its wait for a policy) or is answered not_leader.
func (s *Server) awaitLeaderFor(wait waitOf) func(http.Handler) http.Handler {
	if s.Leader == nil {
		return func(next http.Handler) http.Handler { return next }
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			leading, leader := s.Leader()
			if !leading && leader != "" && leader != s.self() && r.Header.Get(api.FromFollowerHeader) != "" {
				// A follower takes this replica for the leader: its view
				// of the election or this one's is behind. This one
				// waits for its next change; the follower gives the call
				// up at its own (replicaLeaser.Select).
				if leading = s.awaitChange(r.Context(), time.Now().Add(wait(s, r))); !leading {
					// The change may have named this replica, its term
					// not begun yet: then it waits for that below.
					_, leader = s.Leader()
				}
			}
			if !leading && (leader == "" || leader == s.self()) {
				start := time.Now()
				asked := wait(s, r)
				var err error
				leading, _, err = s.awaitLeader(r.Context(), start.Add(asked), "")
				switch {
				case r.Context().Err() != nil:
					return // nobody to answer
				case err != nil && !isCode(err, api.CodeNotLeader):
					s.writeError(w, r, err)
					return
				}
				if leading {
					r = s.spent(r, asked, time.Since(start))
				}
			}
			if leading {
				next.ServeHTTP(w, r)
				return
			}
			s.writeNotLeader(w, r)
		})
	}
}

// spent records that r waited d of the wait it asked for: in its context
// (/select reads it) and as its X-Select-Timeout-MS (proxied requests
// read that), what is left.
func (s *Server) spent(r *http.Request, asked, d time.Duration) *http.Request {
	r.Header.Set(proxy.HeaderSelectTimeoutMS, strconv.FormatInt(max(asked-d, 0).Milliseconds(), 10))
	return r.WithContext(context.WithValue(r.Context(), leaderWaitKey{}, d))
}

// isCode reports whether err is an *Error of code.
func isCode(err error, code string) bool {
	e, ok := err.(*Error)
	return ok && e.Code == code
}
