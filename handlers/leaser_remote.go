package handlers

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/proxy"
	"github.com/policyrouter/policyrouter/routing"
)

// Proxying on every replica. Of several replicas on one store, only the
// leader routes; but every replica proxies the generate traffic that
// reaches it, so that the bytes flow through whichever replica the client
// reached. A follower takes each attempt's lease from the leader with one
// call (POST /internal/leases) and returns it with another, so that each
// policy's capacity is counted in one place; the leader leases from its
// own state. Every lease a replica's requests hold is remembered with the
// leader that counts it: when the leader changes, the requests still
// streaming hand their leases to the new one (PUT /internal/leases/{id},
// or routing.State.Adopt when the new leader is this replica), or, if it
// refuses them (their policy is gone), let them go.

// ReplicaConfig lets a follower proxy: how it names itself to the leader,
// and how it authenticates.
type ReplicaConfig struct {
	// Holder returns this replica's advertise URL: the holder of the
	// leases it hands to a new leader.
	Holder func() string
	// Token returns the bearer token (scope route) this replica presents
	// to the leader; nil sends none (routers without auth). When it fails,
	// a request for a new lease is answered 502 upstream_failed, and
	// logged; a lease granted already goes back with the last token a
	// leader took.
	Token func() (string, error)
	// TokenSource says where Token's tokens come from (a flag), for the
	// log when there is none or the leader refuses one.
	TokenSource string
}

// replicaCallTimeout bounds a call to the leader other than a lease's
// wait for an idle policy.
const replicaCallTimeout = 5 * time.Second

// replicaRetry is the pause before handing leases to a leader that could
// not take them yet (not leading yet, or not reachable).
const replicaRetry = 200 * time.Millisecond

// replicaLeaser is proxy mode's Leaser on one replica of several.
type replicaLeaser struct {
	s   *Server
	cfg ReplicaConfig
	// wake is signalled (LeaderChanged) when the leader may have changed.
	wake chan struct{}

	mu   sync.Mutex
	held map[string]*heldLease // by lease id; guarded by mu

	// accepted is the last token a leader did not refuse: a call about a
	// lease granted already presents it when Token fails or the leader
	// refuses Token's.
	accepted atomic.Pointer[string]
}

// heldLease is a lease one of this replica's proxied requests holds.
type heldLease struct {
	policyID string
	ttl      time.Duration
	// with is the advertise URL of the leader that counts the lease: this
	// replica's own while it leads; "" when none does (this replica's
	// term ended).
	with string
}

var _ proxy.Leaser = (*replicaLeaser)(nil)

func newReplicaLeaser(s *Server, cfg ReplicaConfig) *replicaLeaser {
	return &replicaLeaser{s: s, cfg: cfg, wake: make(chan struct{}, 1), held: make(map[string]*heldLease)}
}

// Select leases the attempt's policy from this replica's state while it
// leads, else from the leader. When there is no leader (none elected, the
// leader did not answer or no longer leads, or this replica's term ended
// while the request waited) it waits for the next one, within req.Wait
// in all (leader_wait.go), and asks it; not_leader when that runs out.
func (l *replicaLeaser) Select(ctx context.Context, req proxy.Request) (routing.Decision, error) {
	deadline := time.Now().Add(req.Wait)
	var (
		unlike string // a leader that failed this request
		last   error  // why the last try leased nothing
	)
	for {
		changed := l.s.leaderWatch.next()
		req.Wait = max(time.Until(deadline), 0)
		req.StickyWait = min(req.StickyWait, req.Wait)
		switch leading, leader := l.s.Leader(); {
		case leading:
			d, err := stateLeaser{l.s}.Select(ctx, req)
			if err == nil && d.LeaseID != "" {
				l.hold(d, req.LeaseTTL, l.cfg.Holder())
			}
			if !errors.Is(err, routing.ErrReset) {
				return d, err
			}
			unlike, last = l.cfg.Holder(), err // its term ended during the wait
		case leader == "" || leader == unlike || leader == l.cfg.Holder():
			if last == nil {
				last = routing.ErrReset // answered not_leader
			}
		default:
			d, err := l.selectAt(ctx, changed, leader, req)
			if err != nil && changed.Err() != nil && ctx.Err() == nil {
				continue // the election moved on during the call: ask again
			}
			if !leaderGone(err) {
				return d, err
			}
			if namesItself(err, leader) && time.Until(deadline) > leaderRetry {
				// Elected, its term not begun: ask it again shortly rather
				// than wait for another leader that will not come.
				last = err
				select {
				case <-time.After(leaderRetry):
				case <-changed.Done():
				case <-ctx.Done():
					return routing.Decision{}, ctx.Err()
				}
				continue
			}
			unlike, last = leader, err
		}
		if _, _, err := l.s.awaitLeader(ctx, deadline, unlike); err != nil {
			if isCode(err, api.CodeNotLeader) {
				return routing.Decision{}, last
			}
			return routing.Decision{}, err
		}
	}
}

// leaderRetry is how soon a follower asks again a leader that answered
// not_leader naming itself: elected, its term about to begin.
const leaderRetry = 50 * time.Millisecond

// namesItself reports whether err is a not_leader answer of leader that
// names leader itself as the leader.
func namesItself(err error, leader string) bool {
	var e *Error
	var u untrusted
	return !errors.As(err, &u) && errors.As(err, &e) && e.Code == api.CodeNotLeader && e.Leader == leader
}

// untrusted is the not_leader of a leader that this replica and it do
// not trust each other's certificates: leaderGone does not take it for a
// fail-over.
type untrusted struct{ e *Error }

func (u untrusted) Error() string { return u.e.Error() }
func (u untrusted) Unwrap() error { return u.e }

// leaderGone reports whether a leader's answer says it cannot lease (it
// did not answer, no longer leads, or is stopping): the next one may.
func leaderGone(err error) bool {
	return isCode(err, api.CodeNotLeader) || isCode(err, api.CodeShuttingDown)
}

// selectAt leases the attempt's policy from leader. The call is given
// up when changed is done (this replica's view of the election moved on):
// a leader that is not leading yet holds it until its own view changes.
func (l *replicaLeaser) selectAt(ctx, changed context.Context, leader string, req proxy.Request) (routing.Decision, error) {
	// Within the bounds of the internal API: the leader caps the wait by
	// its --max-select-wait anyway, and a lease's TTL only guards against
	// a holder that never returns it.
	body := api.LeaseRequest{
		Router: req.Router, EnvID: req.EnvID, SessionID: req.Session,
		TimeoutMS:    int(min(req.Wait, api.MaxLeaseWait).Milliseconds()),
		StickyWaitMS: int(min(req.StickyWait, api.MaxLeaseWait).Milliseconds()),
		MinVersion:   req.MinVersion, LeaseTTLMS: min(req.LeaseTTL, api.MaxLeaseTTL).Milliseconds(),
		Model: req.Model, Route: req.Route, Exclude: req.Exclude, PrefixHashes: req.Prefix,
		AwaitReturn: req.AwaitReturn,
	}
	cctx, cancel := context.WithTimeout(ctx, req.Wait+replicaCallTimeout)
	defer cancel()
	defer context.AfterFunc(changed, cancel)()
	var sel api.SelectResponse
	if err := l.call(cctx, http.MethodPost, leader, "/internal/leases", false, body, &sel); err != nil {
		if ctx.Err() != nil {
			return routing.Decision{}, ctx.Err()
		}
		return routing.Decision{}, err
	}
	d := routing.Decision{
		Policy: l.policy(sel), Node: sel.NodeID, EnvUnmapped: sel.EnvUnmapped,
		LeaseID: sel.LeaseID, Version: sel.Version, WeightLabel: sel.WeightVersion, Sticky: routing.Sticky(sel.Sticky),
		PrefixOutcome: sel.PrefixOutcome,
	}
	if sel.PrefixMatch != nil {
		d.PrefixMatch = *sel.PrefixMatch
	}
	if d.LeaseID != "" {
		l.hold(d, req.LeaseTTL, leader)
		if now, current := l.s.Leader(); now || current != leader {
			l.s.LeaderChanged() // changed during the call: hand it over
		}
	}
	return d, nil
}

// policy is the leased policy as this replica's registration has it (its
// key included, which the leader does not send), or as the leader named
// it when this replica has not heard of it yet.
func (l *replicaLeaser) policy(sel api.SelectResponse) routing.Policy {
	snap := l.s.State.Snapshot()
	if pos, ok := snap.ByID(sel.ID); ok {
		return snap.Policies()[pos]
	}
	return routing.Policy{Index: sel.Index, ID: sel.ID, URL: sel.URL}
}

func (l *replicaLeaser) hold(d routing.Decision, ttl time.Duration, with string) {
	l.mu.Lock()
	l.held[d.LeaseID] = &heldLease{policyID: d.Policy.ID, ttl: ttl, with: with}
	l.mu.Unlock()
}

// Release returns d's lease to the leader that counts it.
func (l *replicaLeaser) Release(ctx context.Context, d routing.Decision, out proxy.Outcome) error {
	l.mu.Lock()
	h := l.held[d.LeaseID]
	delete(l.held, d.LeaseID)
	l.mu.Unlock()
	if h != nil && h.with == "" {
		return nil // counted by no leader: its term ended, and no other took it yet
	}
	if h == nil || h.with == l.cfg.Holder() {
		// Counted here: this replica's own state.
		if lease, ok := l.s.State.ParseLeaseID(d.LeaseID); ok {
			d.Lease = lease
		}
		return stateLeaser{l.s}.Release(ctx, d, out)
	}
	return l.returnTo(ctx, h.with, d.LeaseID, h.policyID, out)
}

// returnTo returns a lease to leader.
func (l *replicaLeaser) returnTo(ctx context.Context, leader, id, policyID string, out proxy.Outcome) error {
	body := api.LeaseReleaseRequest{PolicyID: policyID, Unfinished: out.Unfinished, PrefixHashes: out.Prefix}
	if out.CachedKnown {
		body.CachedTokens = &out.CachedTokens
	}
	if f := out.Failure; f != nil {
		body.Failure = &api.LeaseFailure{At: f.At, Reason: f.Reason}
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replicaCallTimeout)
	defer cancel()
	return l.call(cctx, http.MethodPost, leader, "/internal/leases/"+id+"/release", true, body, nil)
}

// Available returns the policies the leader can route to now.
func (l *replicaLeaser) Available(ctx context.Context) ([]routing.Policy, error) {
	if leading, _ := l.s.Leader(); leading {
		return stateLeaser{l.s}.Available(ctx)
	}
	r, err := l.routable(ctx)
	if err != nil {
		return nil, err
	}
	snap := l.s.State.Snapshot()
	out := make([]routing.Policy, 0, len(r.Available))
	for _, id := range r.Available {
		if pos, ok := snap.ByID(id); ok {
			out = append(out, snap.Policies()[pos])
		}
	}
	return out, nil
}

// ServedModels returns the models the leader knows the policies serve.
func (l *replicaLeaser) ServedModels(ctx context.Context) ([]string, error) {
	if leading, _ := l.s.Leader(); leading {
		return stateLeaser{l.s}.ServedModels(ctx)
	}
	r, err := l.routable(ctx)
	return r.Models, err
}

func (l *replicaLeaser) routable(ctx context.Context) (api.Routable, error) {
	_, leader := l.s.Leader()
	if leader == "" {
		return api.Routable{}, routing.ErrReset
	}
	cctx, cancel := context.WithTimeout(ctx, replicaCallTimeout)
	defer cancel()
	var r api.Routable
	err := l.call(cctx, http.MethodGet, leader, "/internal/routable", false, nil, &r)
	return r, err
}

// call sends one request to the leader and decodes its answer into out
// (when not nil). An error answer is returned as the leader's *Error, to
// be passed on to the client as it is; a leader that does not answer is
// not_leader (retry, the next leader may be elected by then).
//
// granted says the call is about a lease the leader granted already
// (handing it over, returning it). When Token fails, or the leader
// refuses its token, such a call presents the last token a leader took
// instead, so that a token file that went bad while a request ran does
// not leave the request's lease counted until its TTL. A call for a new
// lease fails: 502 upstream_failed, logged.
func (l *replicaLeaser) call(ctx context.Context, method, leader, path string, granted bool, in, out any) error {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = b
	}
	var token string
	if l.cfg.Token != nil {
		var err error
		token, err = l.cfg.Token()
		if err != nil {
			last := l.accepted.Load()
			if !granted || last == nil {
				// This replica's own configuration: as when the leader
				// refuses its token, the client is not at fault.
				l.s.logger.Error("replica: no token to present to the leader", "token", l.cfg.TokenSource, "leader", leader, "err", err)
				return errorf(api.CodeUpstreamFailed, "this replica has no token to present to the leader "+leader+"; see its log")
			}
			l.s.logger.Warn("replica: no token to present to the leader; a lease granted already goes with the last token it took",
				"token", l.cfg.TokenSource, "leader", leader, "err", err)
			token = *last
		}
	}
	status, raw, err := l.send(ctx, method, leader, path, body, token)
	if err != nil {
		return err
	}
	if refused(status) && granted {
		if last := l.accepted.Load(); last != nil && *last != token {
			l.s.logger.Warn("replica: the leader refused this replica's token; a lease granted already goes with the last token it took",
				"token", l.cfg.TokenSource, "leader", leader, "status", status)
			token = *last
			if status, raw, err = l.send(ctx, method, leader, path, body, token); err != nil {
				return err
			}
		}
	}
	if refused(status) {
		// This replica's own credentials, not the client's.
		l.s.logger.Error("replica: the leader refused this replica's token; do the replicas share their token key (--jwt-secret), "+
			"and is the token of --replica-token-file unexpired, unrevoked and of scope route?", "token", l.cfg.TokenSource, "leader", leader, "status", status)
		return errorf(api.CodeUpstreamFailed, fmt.Sprintf("the leader %s refused this replica's token (%d)", leader, status))
	}
	if token != "" {
		l.accepted.Store(&token)
	}
	if status != http.StatusOK {
		var env api.ErrorResponse
		if json.Unmarshal(raw, &env) != nil || env.Error.Code == "" {
			return errorf(api.CodeUpstreamFailed, fmt.Sprintf("the leader %s answered %d", leader, status))
		}
		e := env.Error
		return &Error{Code: e.Code, Message: e.Message, Fields: e.Fields, Leader: e.Leader, Details: e.Details}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return errorf(api.CodeUpstreamFailed, "the leader "+leader+" answered an unreadable body: "+err.Error())
	}
	return nil
}

// refused reports whether a leader's status refuses this replica's token.
func refused(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden
}

// send sends one request to the leader, with token when not "", and
// returns its status and body; a leader that does not answer is
// not_leader.
func (l *replicaLeaser) send(ctx context.Context, method, leader, path string, body []byte, token string) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(leader, "/")+path, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("replica: request to the leader %s: %w", leader, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set(api.FromFollowerHeader, "1")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := l.s.peers.Do(req)
	if err != nil {
		e := errorf(api.CodeNotLeader, "the leader "+leader+" did not answer; retry: "+err.Error())
		var cve *tls.CertificateVerificationError
		var alert tls.AlertError
		if errors.As(err, &cve) || errors.As(err, &alert) {
			// This replica's TLS settings (--peer-ca, --peer-cert): no
			// wait for the next leader mends them.
			return 0, nil, untrusted{e}
		}
		return 0, nil, e
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return 0, nil, errorf(api.CodeNotLeader, "the leader "+leader+" did not answer in full; retry: "+err.Error())
	}
	return res.StatusCode, raw, nil
}

// LeaderChanged tells the replica that the leader may have changed (a
// new one elected, or this replica's term began or ended): the requests
// waiting for a leader look again, and the leases of its requests in
// flight go to the leader now. Safe to call at any time.
func (s *Server) LeaderChanged() {
	s.leaderWatch.wake()
	if s.leases == nil {
		return
	}
	select {
	case s.leases.wake <- struct{}{}:
	default:
	}
}

// TermEnded tells the replica that its term as leader ended and its
// routing state was reset: the leases it counted for its own requests in
// flight are counted nowhere until the next leader takes them. Call it
// after the reset.
func (s *Server) TermEnded() {
	if s.leases == nil {
		s.leaderWatch.wake()
		return
	}
	self := s.leases.cfg.Holder()
	s.leases.mu.Lock()
	for _, h := range s.leases.held {
		if h.with == self {
			h.with = ""
		}
	}
	s.leases.mu.Unlock()
	s.LeaderChanged()
}

// RunLeases hands the leases of this replica's requests in flight to
// each new leader until ctx is done. A replica with proxying on every
// replica (Config.Replica) runs it beside its leader election; without
// it, it returns at once.
func (s *Server) RunLeases(ctx context.Context) {
	l := s.leases
	if l == nil {
		return
	}
	retry := time.NewTimer(replicaRetry)
	defer retry.Stop()
	for {
		if l.rehome(ctx) {
			retry.Stop()
		} else {
			retry.Reset(replicaRetry)
		}
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		case <-retry.C:
		}
	}
}

// rehome hands every held lease that the leader does not count to the
// leader, and reports whether none is left to hand (false: try again).
func (l *replicaLeaser) rehome(ctx context.Context) bool {
	leading, leader := l.s.Leader()
	self := l.cfg.Holder()
	if leading {
		leader = self
	}
	type pending struct {
		id string
		h  heldLease
	}
	var todo []pending
	l.mu.Lock()
	for id, h := range l.held {
		if h.with != leader {
			todo = append(todo, pending{id, *h})
		}
	}
	l.mu.Unlock()
	if len(todo) == 0 {
		return true
	}
	if leader == "" {
		return false
	}
	done := true
	for _, p := range todo {
		err := l.adopt(ctx, leading, leader, p.id, p.h)
		var e *Error
		switch {
		case err == nil:
		case errors.As(err, &e) && (e.Code == api.CodeNotFound || e.Code == api.CodeConflict || e.Code == api.CodeValidationFailed):
			// Refused for good (the policy is gone): the request goes on,
			// uncounted, and its lease is let go.
			l.s.logger.Warn("replica: the leader does not take a lease of a request in flight; it is let go",
				"leader", leader, "lease_id", p.id, "policy_id", p.h.policyID, "err", err)
			l.mu.Lock()
			delete(l.held, p.id)
			l.mu.Unlock()
			continue
		default:
			l.s.logger.Debug("replica: lease not handed to the leader yet", "leader", leader, "lease_id", p.id, "err", err)
			done = false
			continue
		}
		l.mu.Lock()
		h, ok := l.held[p.id]
		if ok {
			h.with = leader
		}
		l.mu.Unlock()
		if !ok {
			// Its request ended meanwhile, and returned it to the old
			// leader: return it to this one too.
			l.releaseAdopted(ctx, leading, leader, p.id, p.h.policyID)
		}
	}
	return done
}

// adopt hands one lease to leader: this replica's state while it leads.
func (l *replicaLeaser) adopt(ctx context.Context, leading bool, leader, id string, h heldLease) error {
	ttl := h.ttl
	if ttl == 0 {
		ttl = l.s.State.LeaseTTL()
	}
	if leading {
		_, err := l.s.State.Adopt(routing.AdoptRequest{ID: id, Holder: leader, PolicyID: h.policyID, TTL: ttl})
		if err != nil {
			return asError(err)
		}
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, replicaCallTimeout)
	defer cancel()
	body := api.AdoptRequest{PolicyID: h.policyID, Holder: l.cfg.Holder(), LeaseTTLMS: min(ttl, api.MaxLeaseTTL).Milliseconds()}
	return l.call(cctx, http.MethodPut, leader, "/internal/leases/"+id, true, body, nil)
}

// releaseAdopted returns a lease adopted after its request ended. How it
// ended is not kept: it is returned unfinished, which holds its slot
// until the next probe rather than risk counting running work as over.
func (l *replicaLeaser) releaseAdopted(ctx context.Context, leading bool, leader, id, policyID string) {
	if leading {
		if lease, ok := l.s.State.ParseLeaseID(id); ok {
			_, _ = l.s.State.ReleaseUnfinished(lease)
		}
		return
	}
	_ = l.returnTo(ctx, leader, id, policyID, proxy.Outcome{Unfinished: true})
}
