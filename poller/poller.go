// Package poller asks every registered policy server whether it is idle and
// feeds the answers to the routing state.
//
// A Poller probes `GET {url}/idle` for each policy of the target's current
// snapshot once per Interval. Probes are spread over the interval (policy i
// of n is probed at offset i*Interval/n of each period) instead of bursting
// all at once, except a policy's first probe: at start, and as soon as a
// policy is registered, it is probed at once, since the router gives it no
// work until it answers. A slow, hung or dead policy never delays the others: at most
// Concurrency probes are in flight, each is bounded by Timeout, and a policy
// whose previous probe is still in flight is skipped for that period rather
// than queued twice. When the poller falls behind (all Concurrency probes
// in flight, or a starved process) the rest of the period shifts later:
// every policy's period stretches alike, and probes never go out in a burst
// to catch up. Results go to Target.ObserveProbe, which decides what
// they mean (health, idle deques, reported loads); the poller only logs
// the health transitions it reports: each at Debug, and those of one
// period together in one line, at Warn when a policy became unhealthy.
package poller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/routing"
)

// Target is what the poller reads policies from and reports probes to: the
// routing state. Implementations must be safe for concurrent use;
// ObserveProbe is called from many probe goroutines at once, but never
// concurrently for the same policy id, and a policy's probes are reported
// in the order they were sent.
type Target interface {
	// Snapshot returns the registered policies; never nil.
	Snapshot() *routing.Snapshot
	// ObserveProbe records one probe of the policy with the given id,
	// with the cause kind of a failed one (routing.Probe.ErrKind), and
	// returns the health transition it caused, if any.
	ObserveProbe(id string, p routing.Probe) routing.Transition
}

var _ Target = (*routing.State)(nil)

// Defaults and limits of Config.
const (
	// DefaultInterval is the default period between two probes of a policy.
	DefaultInterval = 100 * time.Millisecond
	// DefaultTimeout is the default bound on one probe.
	DefaultTimeout = time.Second
	// MaxTimeoutIntervals caps Timeout at this many Intervals, so that a
	// hung policy (probed at most once per Timeout, since a policy is never
	// probed twice at once) is still found unhealthy within a few dozen
	// intervals.
	MaxTimeoutIntervals = 10
	// DefaultConcurrency is the default number of probes in flight at most.
	DefaultConcurrency = 256
	// MaxBodyBytes is the largest /idle answer accepted; a longer body is a
	// failed probe.
	MaxBodyBytes = engine.MaxIdleBytes
)

// coalesce is how close two due times must be to be dispatched in one
// wake-up of the scheduler: with a thousand policies at 100ms the scheduler
// wakes once a millisecond, not ten times.
const coalesce = time.Millisecond

// catchUpDiv sets how far behind its schedule a period may fall and still
// catch up, sending the overdue probes at once: Interval/catchUpDiv.
// Further behind, the rest of the period shifts instead.
const catchUpDiv = 10

// Config configures a Poller. Zero fields take the defaults.
type Config struct {
	// Interval is the period between two probes of the same policy.
	// Default DefaultInterval.
	Interval time.Duration
	// Timeout bounds one probe, from sending the request to reading the
	// body. Default DefaultTimeout, and never more than MaxTimeoutIntervals
	// times Interval (a larger value is lowered, with a warning).
	Timeout time.Duration
	// Concurrency is the most probes in flight at once. When all are taken
	// the next probe waits for one to end (at most Timeout), and the period
	// stretches. It should exceed the number of policies that may hang at
	// once. Default DefaultConcurrency.
	Concurrency int
	// Client sends the probes. Default: a keep-alive client made for many
	// policies, no proxy, no HTTP/2. A given client is copied and its
	// CheckRedirect replaced: redirects are never followed (a 3xx answer is
	// a failed probe).
	Client *http.Client
	// TLSClientConfig, when set, configures the default client's TLS
	// towards https:// policies: a private CA (RootCAs), a client
	// certificate for mutual TLS. It is ignored when Client is set.
	TLSClientConfig *tls.Config
	// Logger receives health transitions: at most one line per period
	// that counts them by state and by cause kind and names the first few
	// policies (Warn when a policy became unhealthy, else Info), and at
	// Debug each policy's transition and failed probe. Default
	// slog.Default().
	Logger *slog.Logger
	// Now stamps probes (SentAt) and measures their latency; default
	// time.Now. Scheduling always uses the runtime's timers.
	Now func() time.Time
	// OnProbe, when set, is called after each probe has been reported to the
	// target, with the transition it caused, e.g. to update metrics. It is
	// called from many goroutines at once and must not block.
	OnProbe func(id string, p routing.Probe, tr routing.Transition)
}

// Poller probes the target's policies in the background. Create it with
// New and start it with Run; Stats may be called at any time from any
// goroutine.
type Poller struct {
	target   Target
	interval time.Duration
	timeout  time.Duration
	conc     int
	jobs     chan *member // unbuffered: a send succeeds only when a worker is idle
	client   *engine.Client
	own      *http.Transport // made by New: its idle connections close when Run ends
	log      *slog.Logger
	now      func() time.Time
	onProbe  func(id string, p routing.Probe, tr routing.Transition)
	health   healthLog // this period's transitions

	running  atomic.Bool
	wg       sync.WaitGroup // probe workers
	sweeps   atomic.Uint64
	probes   atomic.Uint64
	failures atomic.Uint64
	skipped  atomic.Uint64
	inflight atomic.Int64 // probes a worker is running
	pending  atomic.Int64 // probes dispatched and not yet reported
	npol     atomic.Int64
	period   atomic.Int64 // nanoseconds
	// recent counts the probes of the last Window; shared holds the
	// members by id, published by refresh for the readers of each
	// policy's window and of what its engine learnt (RecentProbes,
	// IncrementalStreaming).
	recent probeWindow
	shared atomic.Pointer[map[string]*member]

	// Owned by the Run goroutine.
	workers int // started in this Run, at most conc
	snap    *routing.Snapshot
	members []*member
	byID    map[string]*member
}

// member is one policy as the poller sees it. It is replaced when the
// policy's URL, index, engine, capacity or keys change; a change of its
// asleep record is applied to it in place.
type member struct {
	id    string
	index int
	url   string // as registered
	shown string // url without its password, for logs
	err   error  // the URL does not parse
	// pol is the registration the member probes as, its SleepMarked kept
	// current by refresh (owned by the Run goroutine).
	pol  routing.Policy
	srv  *engine.Server // what the engine learns of the server
	busy atomic.Bool    // a probe is in flight
	gone atomic.Bool    // no longer registered: results are dropped
	// recent counts the policy's probes of the last Window; a member that
	// replaces another of the same id takes it over.
	recent *probeWindow
	// Owned by the Run goroutine: probed once dispatched; early while the
	// current period probed it at once rather than at its offset.
	probed, early bool
}

func newMember(p routing.Policy) *member {
	srv, err := engine.NewServer(p)
	m := &member{id: p.ID, index: p.Index, url: p.URL, shown: srv.Shown, pol: p, srv: srv, recent: &probeWindow{}}
	if err != nil {
		m.err = fmt.Errorf("policy %s: %w", p.ID, err)
	}
	return m
}

// sameProbe reports whether a policy registered as b is probed exactly as
// one registered as a: same engine, capacity and credentials.
func sameProbe(a, b routing.Policy) bool {
	return a.EngineName() == b.EngineName() && a.Capacity == b.Capacity &&
		a.APIKey == b.APIKey && a.AdminAPIKey == b.AdminAPIKey
}

// New returns a Poller of target. It starts nothing: call Run.
func New(target Target, cfg Config) *Poller {
	p := &Poller{
		target:   target,
		interval: cfg.Interval,
		timeout:  cfg.Timeout,
		log:      cfg.Logger,
		now:      cfg.Now,
		onProbe:  cfg.OnProbe,
		byID:     make(map[string]*member),
	}
	if p.interval <= 0 {
		p.interval = DefaultInterval
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.timeout <= 0 {
		p.timeout = DefaultTimeout
	}
	if limit := MaxTimeoutIntervals * p.interval; p.timeout > limit {
		if cfg.Timeout > 0 {
			p.log.Warn("poll timeout lowered", "timeout", cfg.Timeout, "to", limit, "interval", p.interval)
		}
		p.timeout = limit
	}
	conc := cfg.Concurrency
	if conc <= 0 {
		conc = DefaultConcurrency
	}
	p.conc = conc
	p.jobs = make(chan *member)
	if cfg.Client != nil {
		c := *cfg.Client
		c.CheckRedirect = noRedirect
		p.client = &engine.Client{HTTP: &c}
	} else {
		p.own = newTransport(conc, p.timeout, cfg.TLSClientConfig)
		// No Client.Timeout: each probe's context carries the timeout, and a
		// client timeout would cost a timer and a goroutine per request.
		p.client = &engine.Client{HTTP: &http.Client{Transport: p.own, CheckRedirect: noRedirect}}
	}
	return p
}

// Stats describes the poller for GET /stats.
type Stats struct {
	// Interval and Timeout are the effective settings.
	Interval time.Duration
	Timeout  time.Duration
	// Concurrency is the most probes in flight at once.
	Concurrency int
	// Policies is the number of policies probed in the current period:
	// those registered with a URL (a policy without one is left alone).
	Policies int
	// Sweeps counts completed passes over all policies (periods).
	Sweeps uint64
	// ProbesTotal counts probes answered or failed; FailuresTotal the failed
	// ones among them.
	ProbesTotal   uint64
	FailuresTotal uint64
	// SkippedTotal counts due probes not sent because the policy's previous
	// probe was still in flight.
	SkippedTotal uint64
	// Recent counts the probes of the last Window (RecentProbes: one
	// policy's).
	Recent ProbeCounts
	// LastPeriod is how long the last completed period took: Interval, or
	// more when the poller fell behind.
	LastPeriod time.Duration
	// InFlight is the number of probes in flight now.
	InFlight int
}

// Stats returns the poller's settings and counters. It is safe to call
// concurrently with Run.
func (p *Poller) Stats() Stats {
	return Stats{
		Recent:        p.recent.counts(p.now()),
		Interval:      p.interval,
		Timeout:       p.timeout,
		Concurrency:   p.conc,
		Policies:      int(p.npol.Load()),
		Sweeps:        p.sweeps.Load(),
		ProbesTotal:   p.probes.Load(),
		FailuresTotal: p.failures.Load(),
		SkippedTotal:  p.skipped.Load(),
		InFlight:      int(p.inflight.Load()),
		LastPeriod:    time.Duration(p.period.Load()),
	}
}

// RecentProbes returns the probes of the last Window of the registered
// policy id (none for an id not registered, or not probed yet). It is safe
// to call concurrently with Run.
func (p *Poller) RecentProbes(id string) ProbeCounts {
	if members := p.shared.Load(); members != nil {
		if m := (*members)[id]; m != nil {
			return m.recent.counts(p.now())
		}
	}
	return ProbeCounts{}
}

// IncrementalStreaming reports how the server of pol streams a native
// /generate, as the probes of the registered policy of pol's id and URL
// learnt it (engine.Server.IncrementalStreaming): incremental or
// cumulative chunks, and known false when no probe learnt it (not
// probed yet, not registered, an engine that does not say). It is the
// proxy's proxy.StreamForms, safe to call concurrently with Run.
func (p *Poller) IncrementalStreaming(pol routing.Policy) (incremental, known bool) {
	if members := p.shared.Load(); members != nil {
		if m := (*members)[pol.ID]; m != nil && m.url == pol.URL {
			return m.srv.IncrementalStreaming()
		}
	}
	return false, false
}

// ErrRunning is returned by Run when the poller is already running.
var ErrRunning = errors.New("poller: already running")

// Run probes the target's policies until ctx is done: the first period
// starts at once, the next ones every Interval. A new snapshot is picked up
// at the start of the next period. Run returns nil once ctx is done and
// every goroutine it started has exited (probes in flight are cancelled
// and not reported); it returns ErrRunning at once if another Run of the
// same Poller has not returned. A Poller may be run again after Run
// returns.
func (p *Poller) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer p.running.Store(false)
	defer p.closeIdle()
	defer p.health.flush(p.log) // after the workers have reported
	defer p.wg.Wait()
	p.workers = 0

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	start := time.Now()
	var prev time.Time
	for {
		// Last period's transitions, its probes having had that period to
		// answer, in one line.
		p.health.flush(p.log)
		// The sweep shifts start when it falls far behind.
		shifted, ok := p.sweep(ctx, timer, start)
		if !ok {
			return nil
		}
		if !prev.IsZero() {
			p.period.Store(int64(shifted.Sub(prev)))
		}
		prev, start = shifted, shifted.Add(p.interval)
		if !p.sleep(ctx, timer, time.Until(start)) {
			return nil
		}
	}
}

// sweep dispatches one period's probes, policy i of n at start plus
// i*interval/n. A little behind that schedule it catches up; more than
// Interval/catchUpDiv behind, it shifts the rest of the period (and start)
// so as to be that far behind only, rather than send all the overdue probes
// at once. It returns the shifted start, and false when ctx is done.
func (p *Poller) sweep(ctx context.Context, timer *time.Timer, start time.Time) (time.Time, bool) {
	members := p.refresh()
	// Policies never probed (at start, or newly registered) are probed at
	// once: until they answer, the router gives them no work.
	if !p.probeNew(ctx, true) {
		return start, false
	}
	maxLag := p.interval / catchUpDiv
	for i, m := range members {
		if m.early {
			m.early = false // probed at once above
			continue
		}
		wait := time.Until(start.Add(offset(i, len(members), p.interval)))
		if wait < -maxLag {
			start = start.Add(-wait - maxLag)
		} else if !p.sleep(ctx, timer, wait) {
			return start, false
		}
		if !p.dispatch(ctx, m) && ctx.Err() != nil {
			return start, false
		}
	}
	p.sweeps.Add(1)
	return start, ctx.Err() == nil
}

// offset is when, within a period, the i-th of n policies is probed.
func offset(i, n int, interval time.Duration) time.Duration {
	if n <= 0 {
		return 0
	}
	return time.Duration(int64(interval) * int64(i) / int64(n))
}

// sleep waits for d on timer, or not at all when d is below coalesce.
// When the registration changes meanwhile, policies never probed are
// probed at once, without waiting for the next period. It returns false
// when ctx is done.
func (p *Poller) sleep(ctx context.Context, timer *time.Timer, d time.Duration) bool {
	if d < coalesce {
		return ctx.Err() == nil
	}
	timer.Reset(d)
	for {
		select {
		case <-timer.C:
			return true
		case <-p.snap.Replaced():
			p.refresh()
			if !p.probeNew(ctx, false) {
				timer.Stop()
				return false
			}
		case <-ctx.Done():
			timer.Stop()
			return false
		}
	}
}

// probeNew dispatches a probe of every member never probed, and marks it
// early when the period's sweep should then skip it. It returns false when
// ctx is done.
func (p *Poller) probeNew(ctx context.Context, early bool) bool {
	for _, m := range p.members {
		if !m.probed {
			m.probed, m.early = true, early
			if !p.dispatch(ctx, m) && ctx.Err() != nil {
				return false
			}
		}
	}
	return true
}

// refresh returns the members of the target's current snapshot in index
// order, rebuilding them when the snapshot changed. Members of policies
// that keep their id, index and URL carry over, with their in-flight
// probe; the others are marked gone. A carried-over member whose asleep
// record (Policy.SleepMarked) changed takes the new one, and is probed
// again at once (unless a probe is in flight, which reads it when its
// answer comes): a fleet verb's mark takes effect within one probe.
func (p *Poller) refresh() []*member {
	snap := p.target.Snapshot()
	if snap == p.snap {
		return p.members
	}
	pols := snap.Policies()
	members := make([]*member, 0, len(pols))
	byID := make(map[string]*member, len(pols))
	for _, pol := range pols {
		if pol.URL == "" {
			continue // nothing to probe; routing keeps the policy as it is
		}
		m := p.byID[pol.ID]
		if m == nil || m.url != pol.URL || m.index != pol.Index || !sameProbe(m.pol, pol) {
			nm := newMember(pol)
			if m != nil {
				nm.recent = m.recent // the same policy, registered anew
			}
			m = nm
		} else if m.pol.SleepMarked != pol.SleepMarked || m.pol.PauseMarked != pol.PauseMarked {
			m.pol.SleepMarked, m.pol.PauseMarked = pol.SleepMarked, pol.PauseMarked
			m.srv.SetSleepMarked(pol.SleepMarked)
			m.srv.SetPauseMarked(pol.PauseMarked)
			m.probed = false
		}
		members = append(members, m)
		byID[pol.ID] = m
	}
	for id, m := range p.byID {
		if byID[id] != m {
			m.gone.Store(true)
		}
	}
	p.snap, p.members, p.byID = snap, members, byID
	p.shared.Store(&byID)
	p.npol.Store(int64(len(members)))
	return members
}

// dispatch starts a probe of m unless its previous probe is still in
// flight, in which case m is skipped this period. The probe runs on an idle
// worker, else on a new one while there are fewer than Concurrency, else on
// the first to become idle. Workers live until ctx is done, so that a probe
// costs neither a goroutine start nor the growth of a fresh stack. It
// reports whether the probe started: not when skipped or ctx is done.
func (p *Poller) dispatch(ctx context.Context, m *member) bool {
	if !m.busy.CompareAndSwap(false, true) {
		p.skipped.Add(1)
		return false
	}
	p.pending.Add(1)
	select {
	case p.jobs <- m:
		return true
	default:
	}
	if p.workers < p.conc {
		p.workers++
		p.wg.Go(func() { p.work(ctx, m) })
		return true
	}
	select {
	case p.jobs <- m:
		return true
	case <-ctx.Done():
		p.pending.Add(-1)
		m.busy.Store(false)
		return false
	}
}

// work probes m, then every member it is handed, until ctx is done.
func (p *Poller) work(ctx context.Context, m *member) {
	for {
		p.inflight.Add(1)
		p.probeAndReport(ctx, m)
		p.inflight.Add(-1)
		p.pending.Add(-1)
		m.busy.Store(false) // after reporting: a policy's probes are reported in order
		select {
		case m = <-p.jobs:
		case <-ctx.Done():
			return
		}
	}
}

func (p *Poller) closeIdle() {
	if p.own != nil {
		p.own.CloseIdleConnections()
	}
}
