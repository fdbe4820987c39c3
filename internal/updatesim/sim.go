// Package updatesim is a discrete-event model, in simulated time, of what a
// weight update costs an RL rollout: N policies of capacity C serve E env
// workers that run multi-turn episodes (an env step, then a generation,
// both log-normal), routed least-loaded (the episode's previous policy
// first, for its prefix cache), while every Period the weights are
// updated by one of the Strategies. It measures every figure exactly, from
// the events themselves (no sampling), and is deterministic per seed.
//
// An update publishes a new version at its start. A policy that is being
// updated takes no new work; how its work in flight fares is the pause
// mode: "wait" lets it finish (drain), "abort" ends it at once and sends
// it back to be routed again with its prefix (recomputed, since the
// update flushes the cache), "keep" freezes it on the policy until the
// policy resumes. Pause-all pauses every policy at once and loads the
// weights on all of them after the last has drained (the barrier);
// rolling updates at most MaxUnavailable policies at a time, each as soon
// as its own work has drained. Every observation the controller must make
// (drained, loaded) costs it ControlLag.
package updatesim

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Config is one workload, fleet and update schedule.
type Config struct {
	Policies int // N
	Capacity int // C, requests a policy runs at once
	Envs     int // E, env workers, one episode at a time each
	Turns    int // T, turns of an episode

	GenMedian time.Duration // median of the log-normal generation time
	GenSigma  float64
	GenMax    time.Duration // generations are cut at this length (max_new_tokens); 0: none
	EnvMedian time.Duration // median of the log-normal env step
	EnvSigma  float64
	// PrefixCost is the time to recompute one turn of an episode's prefix
	// on a policy that has not got it cached (another policy, or its cache
	// was flushed by an update).
	PrefixCost time.Duration

	Period         time.Duration // P, an update starts every Period
	LoadTime       time.Duration // L, a policy loads weights for this long
	ControlLag     time.Duration // the controller's delay to see a policy drained or loaded
	MaxUnavailable int           // k of the rolling strategies
	Updates        int           // whole updates measured, after the warm-up
	Warmup         time.Duration // run before the first measured update; 0: one Period
	Seed           uint64
}

// Validate reports a configuration the model cannot run.
func (c Config) Validate() error {
	switch {
	case c.Policies < 1 || c.Capacity < 1 || c.Envs < 1 || c.Turns < 1:
		return fmt.Errorf("updatesim: policies, capacity, envs and turns must be at least 1")
	case c.GenMedian <= 0 || c.GenSigma < 0 || c.EnvMedian < 0 || c.EnvSigma < 0 || c.GenMax < 0 || c.PrefixCost < 0:
		return fmt.Errorf("updatesim: generation median must be positive, the other times and sigmas >= 0")
	case c.Period <= 0 || c.LoadTime < 0 || c.ControlLag < 0 || c.Updates < 1 || c.Warmup < 0:
		return fmt.Errorf("updatesim: period must be positive, updates at least 1, load time, lag and warm-up >= 0")
	case c.MaxUnavailable < 1 || c.MaxUnavailable > c.Policies:
		return fmt.Errorf("updatesim: max unavailable must be in [1, policies]")
	}
	return nil
}

// Strategy is one way of doing the updates.
type Strategy struct {
	Name    string
	Rolling bool   // at most MaxUnavailable at a time; else pause-all
	Pause   string // PauseWait, PauseAbort or PauseKeep; "" for no update
}

// Pause modes.
const (
	PauseWait  = "wait"
	PauseAbort = "abort"
	PauseKeep  = "keep"
)

// Strategies are the no-update baseline and the six update strategies, in
// report order.
var Strategies = []Strategy{
	{Name: "none"},
	{Name: "pause-all wait", Pause: PauseWait},
	{Name: "pause-all abort", Pause: PauseAbort},
	{Name: "pause-all keep", Pause: PauseKeep},
	{Name: "rolling wait", Rolling: true, Pause: PauseWait},
	{Name: "rolling abort", Rolling: true, Pause: PauseAbort},
	{Name: "rolling keep", Rolling: true, Pause: PauseKeep},
}

// Lookup returns the strategy of a name in Strategies.
func Lookup(name string) (Strategy, bool) {
	for _, s := range Strategies {
		if s.Name == name {
			return s, true
		}
	}
	return Strategy{}, false
}

// Lost is policy-seconds out of service, split by cause. A policy being
// updated loses, each instant, the share of its capacity not generating:
// Barrier while it waits to start loading (draining, or drained and
// waiting for the others), Load while it loads, Lag while the controller
// has yet to see it drained or loaded.
type Lost struct {
	Load, Barrier, Lag float64
}

// Total is the sum of the causes.
func (l Lost) Total() float64 { return l.Load + l.Barrier + l.Lag }

// Result is what one strategy did in the measured window.
type Result struct {
	Strategy string
	// Window is the measured time in seconds: from the warm-up's end to
	// the end of the last measured update's period, or of the update
	// itself when it ran later.
	Window float64
	// Updates counts the whole updates in the window; Fits is false when
	// one cycle outlasted the period (the next then started late).
	Updates  int
	Fits     bool
	MaxCycle float64 // the longest update cycle, seconds
	// LostPerUpdate is the mean over updates.
	LostPerUpdate Lost
	// EpisodesPerSecond is turns ended in the window over T, per second.
	EpisodesPerSecond float64
	// WaitP50, WaitP99: seconds an env worker's turn took beyond its own
	// generation (queueing, pauses, prefix recompute), over the turns that
	// overlapped an update.
	WaitP50, WaitP99 float64
	// MinRoutable is the fewest policies taking new work at any instant of
	// the window.
	MinRoutable int
	// VersionLag is the share of generated tokens (generation time, prefix
	// recompute excluded) produced with weights older than the newest
	// published version.
	VersionLag float64
}

// Run simulates one strategy on the workload and returns its figures.
func Run(cfg Config, s Strategy) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	m := newModel(cfg, s)
	m.run()
	return m.result(), nil
}

func secs(d time.Duration) float64 { return d.Seconds() }

// Policy phases while it is updated; phaseServing otherwise.
const (
	phaseServing = iota
	phaseBarrier // drained or draining, not loading yet
	phaseLoad
	phaseLag
)

type request struct {
	worker  int
	episode int
	turn    int
	arrived float64 // when the env step ended
	base    float64 // its generation time, for the wait
	prefill float64 // prefix recompute still to do
	gen     float64 // generation still to do
	policy  int     // -1 when queued
	since   float64 // last settled
	frozen  bool
	seq     int // bumped to cancel its pending end event
}

type policy struct {
	phase    int
	routable bool
	version  int
	epoch    int // cache epoch: an update flushes the cache
	reqs     []*request
	acctAt   float64
	group    *group // its group in the current update, if any
}

// running is how many of its requests are generating (not frozen).
func (p *policy) running() int {
	n := 0
	for _, r := range p.reqs {
		if !r.frozen {
			n++
		}
	}
	return n
}

type event struct {
	at   float64
	kind int
	id   int // worker, policy or update
	seq  int
	r    *request
}

const (
	evEnvDone = iota // worker id's env step ended
	evGenDone        // request r ended (if seq matches)
	evUpdate         // update id starts
	evStep           // policy id's next update step is due
)

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].kind < q[j].kind
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type episodeState struct {
	policy, epoch, turn int
}

type updateRec struct {
	start, end float64
	lost       Lost
}

type model struct {
	cfg      Config
	s        Strategy
	rng      *rand.Rand
	now      float64
	q        eventQueue
	policies []*policy
	queue    []*request // waiting for a slot, FIFO
	episodes []episodeState
	epNum    []int

	newest   int
	updates  []*updateRec
	cur      *updateRec
	groups   []*group // of the current update
	late     int      // updates due while another ran
	winStart float64
	// winEnd ends the window, and the run: W + M P, or the end of the
	// last update when it ran later (infinite until it has ended).
	winEnd    float64
	minRout   int
	turnsDone int
	waits     []float64
	tokens    float64
	staleTok  float64
}

func newModel(cfg Config, s Strategy) *model {
	m := &model{cfg: cfg, s: s, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)), minRout: cfg.Policies}
	for range cfg.Policies {
		m.policies = append(m.policies, &policy{routable: true})
	}
	m.episodes = make([]episodeState, cfg.Envs)
	m.epNum = make([]int, cfg.Envs)
	for i := range m.episodes {
		m.episodes[i].policy = -1
	}
	warm := cfg.Warmup
	if warm == 0 {
		warm = cfg.Period
	}
	m.winStart = secs(warm)
	m.winEnd = m.winStart + float64(cfg.Updates)*secs(cfg.Period)
	if s.Pause != "" {
		m.winEnd = math.Inf(1)
	}
	return m
}

func (m *model) push(e event) { heap.Push(&m.q, e) }

func (m *model) lognormal(median time.Duration, sigma float64) float64 {
	return secs(median) * math.Exp(sigma*m.rng.NormFloat64())
}

func (m *model) run() {
	for w := range m.cfg.Envs {
		// Start each worker at a random point of its first env step, so
		// that the fleet does not start in lockstep.
		m.push(event{at: m.rng.Float64() * m.lognormal(m.cfg.EnvMedian, m.cfg.EnvSigma), kind: evEnvDone, id: w})
	}
	if m.s.Pause != "" {
		for i := range m.cfg.Updates {
			m.push(event{at: m.winStart + float64(i)*secs(m.cfg.Period), kind: evUpdate, id: i})
		}
	}
	for m.q.Len() > 0 {
		e := heap.Pop(&m.q).(event)
		if e.at > m.winEnd {
			break
		}
		m.now = e.at
		switch e.kind {
		case evEnvDone:
			m.arrive(e.id)
		case evGenDone:
			if e.r.seq == e.seq && e.r.policy >= 0 {
				m.finish(e.r)
			}
		case evUpdate:
			if m.cur != nil {
				m.late++
			} else {
				m.startUpdate()
			}
		case evStep:
			m.step(e.id)
		}
		m.dispatch()
		m.noteRoutable()
	}
	m.now = m.winEnd
	for _, p := range m.policies {
		m.settlePolicy(p)
	}
}

// inWindow reports whether t is in the measured window.
func (m *model) inWindow(t float64) bool { return t >= m.winStart && t < m.winEnd }

func (m *model) noteRoutable() {
	if !m.inWindow(m.now) {
		return
	}
	n := 0
	for _, p := range m.policies {
		if p.routable {
			n++
		}
	}
	m.minRout = min(m.minRout, n)
}

// arrive: worker w's env step ended; its turn asks for a policy.
func (m *model) arrive(w int) {
	ep := &m.episodes[w]
	gen := m.lognormal(m.cfg.GenMedian, m.cfg.GenSigma)
	if m.cfg.GenMax > 0 {
		gen = min(gen, secs(m.cfg.GenMax))
	}
	m.queue = append(m.queue, &request{worker: w, episode: m.epNum[w], turn: ep.turn, arrived: m.now, base: gen, gen: gen, policy: -1})
}

// pick chooses a routable policy with a free slot for r: the episode's
// previous one, else the least loaded (lowest index on ties); -1 if none.
func (m *model) pick(r *request) int {
	if prev := m.episodes[r.worker].policy; prev >= 0 && r.turn > 0 {
		if p := m.policies[prev]; p.routable && len(p.reqs) < m.cfg.Capacity {
			return prev
		}
	}
	best := -1
	for i, p := range m.policies {
		if p.routable && len(p.reqs) < m.cfg.Capacity && (best < 0 || len(p.reqs) < len(m.policies[best].reqs)) {
			best = i
		}
	}
	return best
}

// dispatch starts queued requests, in order, while slots are free.
func (m *model) dispatch() {
	n := 0
	for _, r := range m.queue {
		i := m.pick(r)
		if i < 0 {
			break // no routable policy has a free slot: none will for the rest
		}
		n++
		p := m.policies[i]
		m.acct(p)
		ep := &m.episodes[r.worker]
		if r.turn > 0 && (ep.policy != i || ep.epoch != p.epoch) {
			r.prefill += float64(r.turn) * secs(m.cfg.PrefixCost)
		}
		ep.policy, ep.epoch = i, p.epoch
		r.policy, r.since, r.frozen = i, m.now, false
		p.reqs = append(p.reqs, r)
		m.schedule(r)
	}
	m.queue = m.queue[n:]
}

func (m *model) schedule(r *request) {
	r.seq++
	m.push(event{at: m.now + r.prefill + r.gen, kind: evGenDone, seq: r.seq, r: r})
}

// settle accounts r's progress since it was last settled: prefill first,
// then generation, whose tokens count as stale when its policy's weights
// are older than the newest.
func (m *model) settle(r *request) {
	if r.policy < 0 || r.frozen {
		r.since = m.now
		return
	}
	d := m.now - r.since
	r.since = m.now
	pre := min(d, r.prefill)
	r.prefill -= pre
	g := min(d-pre, r.gen)
	r.gen -= g
	// Tokens in the window only: the share of this stretch inside it.
	if in := min(m.now, m.winEnd) - max(m.now-d, m.winStart); in > 0 && d > 0 {
		g *= in / d
		m.tokens += g
		if m.policies[r.policy].version < m.newest {
			m.staleTok += g
		}
	}
}

func (m *model) settlePolicy(p *policy) {
	m.acct(p)
	for _, r := range p.reqs {
		m.settle(r)
	}
}

// acct adds p's lost capacity since it was last accounted to the current
// update, by phase.
func (m *model) acct(p *policy) {
	from := max(p.acctAt, m.winStart)
	to := min(m.now, m.winEnd)
	p.acctAt = m.now
	if p.phase == phaseServing || m.cur == nil || to <= from {
		return
	}
	lost := (to - from) * (1 - float64(p.running())/float64(m.cfg.Capacity))
	switch p.phase {
	case phaseBarrier:
		m.cur.lost.Barrier += lost
	case phaseLoad:
		m.cur.lost.Load += lost
	case phaseLag:
		m.cur.lost.Lag += lost
	}
}

func (m *model) finish(r *request) {
	p := m.policies[r.policy]
	m.acct(p)
	m.settle(r)
	p.reqs = slices.DeleteFunc(p.reqs, func(x *request) bool { return x == r })
	r.policy = -1
	if m.inWindow(m.now) {
		m.turnsDone++
		if m.overlapsUpdate(r.arrived, m.now) {
			m.waits = append(m.waits, m.now-r.arrived-r.base)
		}
	}
	ep := &m.episodes[r.worker]
	ep.turn++
	if ep.turn == m.cfg.Turns {
		ep.turn, ep.policy = 0, -1
		m.epNum[r.worker]++
	}
	m.push(event{at: m.now + m.lognormal(m.cfg.EnvMedian, m.cfg.EnvSigma), kind: evEnvDone, id: r.worker})
	if g := p.group; g != nil && m.s.Pause == PauseWait && g.drained(m) {
		m.advance(g)
	}
}

// overlapsUpdate reports whether [a, b] overlaps a measured update.
func (m *model) overlapsUpdate(a, b float64) bool {
	for _, u := range m.updates {
		end := u.end
		if end == 0 {
			end = math.Inf(1)
		}
		if a <= end && b >= u.start {
			return true
		}
	}
	return false
}

func (m *model) result() Result {
	res := Result{Strategy: m.s.Name, Window: m.winEnd - m.winStart, Fits: true, MinRoutable: m.minRout}
	for _, u := range m.updates {
		if u.end == 0 {
			continue // cannot happen: the run ends with the last update
		}
		res.Updates++
		cycle := u.end - u.start
		res.MaxCycle = max(res.MaxCycle, cycle)
		res.Fits = res.Fits && cycle <= secs(m.cfg.Period)
		res.LostPerUpdate.Load += u.lost.Load
		res.LostPerUpdate.Barrier += u.lost.Barrier
		res.LostPerUpdate.Lag += u.lost.Lag
	}
	if n := float64(res.Updates); n > 0 {
		res.LostPerUpdate.Load /= n
		res.LostPerUpdate.Barrier /= n
		res.LostPerUpdate.Lag /= n
	}
	res.EpisodesPerSecond = float64(m.turnsDone) / float64(m.cfg.Turns) / res.Window
	slices.Sort(m.waits)
	res.WaitP50, res.WaitP99 = Percentile(m.waits, 0.5), Percentile(m.waits, 0.99)
	if m.tokens > 0 {
		res.VersionLag = m.staleTok / m.tokens
	}
	return res
}

// Percentile is the nearest-rank q-quantile of sorted; 0 when empty.
func Percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
