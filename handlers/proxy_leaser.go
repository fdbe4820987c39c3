package handlers

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/policyrouter/policyrouter/poller"
	"github.com/policyrouter/policyrouter/proxy"
	"github.com/policyrouter/policyrouter/routing"
)

// Proxy mode (package proxy) serves POST /v1/completions,
// /v1/chat/completions, /generate and GET /v1/models: its Leaser is
// stateLeaser, over the routing state the server routes with, or, on a
// replica of several that proxies as a follower too, replicaLeaser
// (leaser_remote.go).

// stateLeaser leases the policies of proxied requests from the server's
// routing.State: each attempt is one decision of the /select kind, counted
// in /stats and the decision metrics as "proxy".
type stateLeaser struct{ s *Server }

var _ proxy.Leaser = stateLeaser{}

var _ proxy.StreamForms = (*poller.Poller)(nil)

// Select decides and leases the policy of one attempt. A graceful
// shutdown (Stop) ends its wait with routing.ErrShuttingDown.
func (l stateLeaser) Select(ctx context.Context, req proxy.Request) (routing.Decision, error) {
	row, ok := routing.LookupRouter(req.Router)
	if !ok || !row.Leases() {
		return routing.Decision{}, &routing.InputError{Field: proxy.HeaderRouter, Msg: "must be a router that leases: " +
			routing.NameList(routing.LeasingRouterNames()) + ", not " + strconv.Quote(req.Router)}
	}
	start := time.Now()
	d, err := l.s.State.Select(ctx, routing.SelectRequest{
		Router: row.Select, EnvID: req.EnvID, Wait: req.Wait, Stop: l.s.stopping.Done(), LeaseTTL: req.LeaseTTL,
		MinVersion: req.MinVersion, Session: req.Session, StickyWait: req.StickyWait, Exclude: req.Exclude,
		Model: req.Model, Route: req.Route, PrefixHashes: req.Prefix, AwaitReturn: req.AwaitReturn,
	})
	l.s.observeDecision("proxy", req.Router, start)
	return d, err
}

// Release ends d's lease, its work unfinished or not, and records the
// failure, if any.
func (l stateLeaser) Release(_ context.Context, d routing.Decision, out proxy.Outcome) error {
	var err error
	if d.Lease != 0 {
		if _, err = l.s.endLease(d.Lease, out.Unfinished); errors.Is(err, routing.ErrLeaseEnded) {
			err = nil
		}
	}
	if f := out.Failure; f != nil {
		l.s.State.ObserveFailure(d.Policy.ID, f.At, f.Reason)
	}
	l.s.State.PrefixRelease(d.Policy.ID, out.Prefix, out.Failure == nil && !out.Unfinished, cachedTokens(out))
	return err
}

// cachedTokens is the prompt tokens the engine reported cached for the
// attempt, or -1 when it reported none.
func cachedTokens(out proxy.Outcome) int {
	if !out.CachedKnown {
		return -1
	}
	return out.CachedTokens
}

// endLease ends a proxied attempt's lease: unfinished when its work may
// still run (proxy.Outcome).
func (s *Server) endLease(lease uint64, unfinished bool) (routing.Decision, error) {
	if unfinished {
		return s.State.ReleaseUnfinished(lease)
	}
	return s.State.Release(lease)
}

// Available returns the policies that pass the availability filter.
func (l stateLeaser) Available(context.Context) ([]routing.Policy, error) {
	var out []routing.Policy
	for _, ps := range l.s.State.Stats().Policies {
		if ps.Available {
			out = append(out, ps.Policy)
		}
	}
	return out, nil
}

// ServedModels returns the models the registered policies serve.
func (l stateLeaser) ServedModels(context.Context) ([]string, error) {
	return l.s.State.ServedModels(), nil
}

// newProxy builds the proxy of the server's proxy mode: on a replica
// that proxies whether it leads or not, over the replicaLeaser.
func (s *Server) newProxy() *proxy.Proxy {
	var leaser proxy.Leaser = stateLeaser{s}
	if s.leases != nil {
		leaser = s.leases
	}
	// The poller knows how each SGLang policy streams (its server info);
	// where it does not (a follower's poller runs only while it leads),
	// a stream's chunks say it.
	forms, _ := s.Poller.(proxy.StreamForms)
	return proxy.New(proxy.Config{
		Options:           s.Proxy,
		Leaser:            leaser,
		StreamForms:       forms,
		WriteError:        s.writeProxyError,
		DefaultRouter:     s.DefaultRouter,
		DefaultSelectWait: s.DefaultSelectWait,
		MaxSelectWait:     s.MaxSelectWait,
		DefaultStickyWait: s.DefaultStickyWait,
		Metrics:           s.Metrics,
		Logger:            s.logger,
	})
}

// writeProxyError answers a proxied request the proxy could not forward:
// not_leader when this replica stopped leading while the request waited,
// else the error envelope.
func (s *Server) writeProxyError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, routing.ErrReset) {
		s.writeNotLeader(w, r)
		return
	}
	s.writeError(w, r, err)
}
