package app

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/handlers"
)

// DefaultLeaderTTL is the default of Config.LeaderTTL.
const DefaultLeaderTTL = 2 * time.Second

// Leader reports whether this router leads (routes and polls) and the
// advertised URL of the replica that does, when one is known. A router on
// a store of its own always leads.
func (a *App) Leader() (leading bool, leader string) {
	if a.etcd == nil {
		return true, a.Config.AdvertiseURL
	}
	if p := a.leader.Load(); p != nil {
		leader = *p
	}
	return a.leading.Load(), leader
}

// electionPrefix is where the replicas on one etcd prefix campaign.
func (a *App) electionPrefix() string { return a.etcd.Prefix() + "leader" }

// runReplica is Run on an etcd store: keep the registration current,
// watch who leads, and campaign; lead while elected.
func (a *App) runReplica(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		a.Registry.Follow(ctx, func(err error) { a.Config.Logger.Error("registration from etcd not applied", "err", err) })
	})
	wg.Go(func() { a.watchLeader(ctx) })
	// The leases of this replica's proxied requests go to each new leader.
	wg.Go(func() { a.Server.RunLeases(ctx) })
	ttl := int(math.Ceil(a.Config.LeaderTTL.Seconds()))
	for ctx.Err() == nil {
		lease, err := a.campaign(ctx, ttl)
		if lease != clientv3.NoLease {
			// The ended session is revoked, not left to expire, so that
			// another replica takes over at once. When etcd itself is what
			// failed, that is retried in the background until etcd is
			// back: a lease outlives an etcd restart with its ttl renewed,
			// and its campaign key would hold back the next election,
			// this replica's included, by that long.
			wg.Go(func() { a.revoke(ctx, lease) })
		}
		if err != nil && ctx.Err() == nil {
			a.Config.Logger.Warn("leader election: campaign ended; campaigning again", "err", err)
			sleep(ctx, 500*time.Millisecond)
		}
	}
	return nil
}

// campaign runs one etcd session: it campaigns for leadership, leads
// until the session is lost or ctx is done, and then gives the session up,
// returning its lease for the caller to revoke (NoLease when none was
// granted).
func (a *App) campaign(ctx context.Context, ttl int) (clientv3.LeaseID, error) {
	cli := a.etcd.Client()
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
	if err != nil {
		return clientv3.NoLease, fmt.Errorf("new session: %w", err)
	}
	defer sess.Orphan()
	term, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sess.Done():
			cancel()
		case <-term.Done():
		}
	}()
	el := concurrency.NewElection(sess, a.electionPrefix())
	// A cancelled Campaign resigns with the client's own context, which an
	// unreachable etcd holds until the store is closed: a replica that
	// stops does not wait for it (runReplica revokes the lease, which
	// removes the key, and closing the store ends the call).
	campaigned := make(chan error, 1)
	go func() { campaigned <- el.Campaign(term, a.Config.AdvertiseURL) }()
	select {
	case err = <-campaigned:
	case <-ctx.Done():
		return sess.Lease(), nil
	}
	if err != nil {
		return sess.Lease(), fmt.Errorf("campaign: %w", err)
	}
	// Update documents are written only while this key stands.
	a.etcd.Fence(el.Key(), el.Rev())
	a.lead(term)
	if ctx.Err() == nil {
		return sess.Lease(), fmt.Errorf("etcd session lost (leader ttl %ds)", ttl)
	}
	return sess.Lease(), nil
}

// revoke revokes the lease of a session that ended. While ctx lasts it
// tries again, for at most revokeFor, while etcd cannot be reached; once
// ctx is done (the replica stops) it makes one attempt of a second.
func (a *App) revoke(ctx context.Context, lease clientv3.LeaseID) {
	cli := a.etcd.Client()
	deadline := time.Now().Add(revokeFor)
	for attempt := 1; ; attempt++ {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_, err := cli.Revoke(rctx, lease)
		cancel()
		if err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) {
			if attempt > 1 {
				a.Config.Logger.Info("leader election: the ended session is revoked", "attempts", attempt)
			}
			return
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			a.Config.Logger.Warn("leader election: session not revoked; it expires after the leader ttl", "err", err)
			return
		}
		if attempt == 1 {
			a.Config.Logger.Warn("leader election: session not revoked; trying again until etcd answers", "err", err)
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// revokeFor bounds the retries of revoke.
const revokeFor = time.Minute

// lead is one term of leadership: it ends when ctx is done. The routing
// state starts from nothing (every policy unknown until probed, no
// leases), the registration and the rolling updates are read from etcd,
// and the poller and the update runner run for the term.
func (a *App) lead(ctx context.Context) {
	start := time.Now()
	a.State.Reset()
	a.ready.Store(a.Poller == nil)
	// One read of etcd: the registration, and the updates to continue.
	reg, err := a.Registry.Refresh(ctx)
	if err != nil {
		a.Config.Logger.Error("leading: registration not reloaded", "err", err)
	}
	if reg.Updates != nil {
		if err := a.Updates.Restore(reg.Updates); err != nil {
			a.Config.Logger.Error("leading: rolling updates not restored", "err", err)
		}
	}
	a.leading.Store(true)
	a.Metrics.SetLeader(true)
	a.Server.LeaderChanged()
	a.Config.Logger.Info("leading: this replica routes and polls", "advertise_url", a.Config.AdvertiseURL)
	a.runTerm(ctx)
	a.leading.Store(false)
	a.Metrics.SetLeader(false)
	a.State.Reset()
	a.Server.TermEnded()
	a.Config.Logger.Info("no longer leading", "term", time.Since(start).Round(time.Millisecond))
}

// watchLeader keeps a.leader current: the value of the oldest campaign
// key (the leader's advertised URL), or nothing while none is elected. A
// change of leader is logged at INFO, so that a follower's log says whom
// it follows.
func (a *App) watchLeader(ctx context.Context) {
	cli, prefix := a.etcd.Client(), a.electionPrefix()+"/"
	last := "\x00" // none seen yet
	for ctx.Err() == nil {
		resp, err := cli.Get(ctx, prefix, clientv3.WithFirstCreate()...)
		if err != nil {
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		leader := ""
		if len(resp.Kvs) > 0 {
			leader = string(resp.Kvs[0].Value)
		}
		a.leader.Store(&leader)
		if leader != last {
			last = leader
			a.Server.LeaderChanged()
			switch {
			case leader == "":
				a.Config.Logger.Info("leader election: no leader elected")
			case leader == a.Config.AdvertiseURL:
				a.Config.Logger.Info("leader election: this replica leads", "leader", leader)
			default:
				a.Config.Logger.Info("leader election: following", "leader", leader)
			}
		}
		// Wait for any change of the campaign keys, then read again.
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		select {
		case <-wch:
		case <-ctx.Done():
		}
		cancel()
	}
}

// electable reports whether a leader can be elected now: nil, or
// store_unavailable when etcd does not answer. A routing request that
// finds no leader asks it before it waits for one (handlers.Config.Election).
// The answer is shared: the requests of one fail-over ask etcd once in
// storeCheckFresh.
func (a *App) electable(ctx context.Context) error {
	c := &a.storeCheck
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < storeCheckFresh {
		return c.err
	}
	pctx, cancel := context.WithTimeout(ctx, storePingTimeout)
	defer cancel()
	err := a.etcd.Ping(pctx)
	if err != nil && ctx.Err() != nil {
		return ctx.Err() // the caller left: no news of the store
	}
	c.err, c.at = nil, time.Now()
	if err != nil {
		c.err = &handlers.Error{Code: api.CodeStoreDown, Message: "no leader is elected, and none can be: the store (etcd) does not answer: " + err.Error()}
	}
	return c.err
}

// storeCheck is the last answer of electable; its mutex makes the
// requests that ask at once share one call to etcd.
type storeCheck struct {
	mu  sync.Mutex
	at  time.Time
	err error
}

// storeCheckFresh is how long electable's answer is used again.
const storeCheckFresh = 500 * time.Millisecond

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
