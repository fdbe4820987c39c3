package fakepolicy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is how a simulated policy answers GET /idle.
type Mode int32

// Modes of a simulated policy.
const (
	// ModeNormal answers 200 {"idle": bool, "load": n}.
	ModeNormal Mode = iota
	// ModeBare answers 200 with a bare true or false.
	ModeBare
	// ModeFail answers 500.
	ModeFail
	// ModeHang never answers: the request ends when the client gives up or
	// the fleet closes.
	ModeHang
	// ModeGarbage answers 200 with a body that is not an idle answer.
	ModeGarbage
	// ModeFlap answers Options.FlapProbes probes normally, then fails as
	// many with 500, and so on, starting afresh when the mode is set.
	ModeFlap
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case ModeNormal:
		return "normal"
	case ModeBare:
		return "bare"
	case ModeFail:
		return "fail"
	case ModeHang:
		return "hang"
	case ModeGarbage:
		return "garbage"
	case ModeFlap:
		return "flap"
	}
	return fmt.Sprintf("Mode(%d)", int32(m))
}

// Policy is one simulated policy server. All methods are safe for
// concurrent use.
type Policy struct {
	fleet *Fleet
	index int
	url   string

	mode    atomic.Int32
	flaps   atomic.Uint64 // probes since the mode was set, for ModeFlap
	delay   atomic.Int64  // nanoseconds before each /idle answer
	version atomic.Int64  // weight version reported by /idle
	// failUpdates makes weight updates fail; updates counts those done.
	failUpdates atomic.Bool
	updates     atomic.Uint64

	probes atomic.Uint64
	works  atomic.Uint64
	// peak is the most work items the policy has held at once (running
	// and waiting): what a test holds against its capacity.
	peak atomic.Int64

	mu   sync.Mutex
	jobs []*workItem // unfinished work
	busy busyLedger  // guarded by mu
	// frozenAt is when a pause froze the work (freeze.go), zero when not
	// frozen; thawed, while not nil, holds new work and is closed by the
	// thaw; frozenFor sums the freezes ended. Guarded by mu.
	frozenAt  time.Time
	thawed    chan struct{}
	frozenFor time.Duration

	prefix prefixCache
	// blocks is the simulated KV cache of prompt blocks (blockcache.go).
	blocks blockCache

	engine engineState
	// aborted is the signal of the next abort (engines.go), guarded by mu.
	aborted *abortSignal
}

// URL returns the policy's base URL: GET URL()+"/idle" probes it.
func (p *Policy) URL() string { return p.url }

// SetMode changes how the policy answers /idle from the next probe on.
func (p *Policy) SetMode(m Mode) {
	p.flaps.Store(0)
	p.mode.Store(int32(m))
}

// Mode returns how the policy answers /idle.
func (p *Policy) Mode() Mode { return Mode(p.mode.Load()) }

// SetVersion sets the weight version the policy reports in /idle.
func (p *Policy) SetVersion(v int64) { p.version.Store(v) }

// SetDelay makes the policy wait d before answering each /idle (in any
// mode), like a slow server; 0 answers at once.
func (p *Policy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// StartWork makes the policy busy with one more work item for a random
// duration (in [MinWork, MaxWork], or log-normal with Options.GenMedian),
// and returns that duration.
func (p *Policy) StartWork() time.Duration {
	d := p.fleet.workDuration()
	p.StartWorkFor(d)
	return d
}

// StartWorkFor makes the policy busy with one more work item for d: from
// now, or with Options.Serial from the end of the work ahead of it.
func (p *Policy) StartWorkFor(d time.Duration) { p.startWork(d) }

// workItem is one unfinished work item: when it ends, by the fleet's
// clock (a thaw moves it).
type workItem struct{ end time.Time }

// startWork is StartWorkFor; it returns the item, and when it ends.
func (p *Policy) startWork(d time.Duration) (*workItem, time.Time) {
	p.works.Add(1)
	now := p.fleet.opts.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	start := now
	if p.fleet.opts.Serial && p.busy.to.After(now) {
		start = p.busy.to
	}
	it := &workItem{end: start.Add(d)}
	p.pruneLocked(now)
	p.jobs = append(p.jobs, it)
	if n := int64(len(p.jobs)); n > p.peak.Load() {
		p.peak.Store(n) // under mu: no lost maximum
	}
	p.busy.add(start, it.end)
	return it, it.end
}

// cancelWork ends a work item now, as an engine aborts a request whose
// client disconnected: it no longer counts in the load, and the busy
// period ends with the work left (not before now). An item already done
// or aborted is left alone. With Options.Serial the work queued behind it
// keeps its start.
func (p *Policy) cancelWork(it *workItem) {
	now := p.fleet.opts.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.Index(p.jobs, it)
	if i < 0 {
		return
	}
	p.jobs = slices.Delete(p.jobs, i, i+1)
	if !p.frozenAt.IsZero() && now.After(p.frozenAt) {
		now = p.frozenAt
	}
	if !p.busy.to.After(now) {
		return
	}
	end := now
	if end.Before(p.busy.from) {
		end = p.busy.from
	}
	for _, j := range p.jobs {
		if j.end.After(end) {
			end = j.end
		}
	}
	p.busy.to = end
}

// PeakLoad returns the most work items the policy has held at once.
func (p *Policy) PeakLoad() int64 { return p.peak.Load() }

// ResetPeak starts the peak over from the work the policy holds now, so
// that a test can hold one phase of a run to its capacity apart from the
// others.
func (p *Policy) ResetPeak() {
	now := p.fleet.opts.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.peak.Store(int64(p.pruneLocked(now)))
}

// servePeak answers GET /peak with the policy's peak and current load,
// and the work items it was given: a test's view, from another process,
// of how much work the router let pile up on it and whether it still
// sends any.
func (p *Policy) servePeak(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]int64{"peak_load": p.PeakLoad(), "load": int64(p.Load()), "works": int64(p.Works())})
}

// Load returns the number of work items not yet done.
func (p *Policy) Load() int {
	now := p.fleet.opts.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pruneLocked(now)
}

// Idle reports whether the policy has no work.
func (p *Policy) Idle() bool { return p.Load() == 0 }

// pruneLocked drops the work done by now (by the freeze, while frozen) and
// returns the work left. Caller must hold mu.
func (p *Policy) pruneLocked(now time.Time) int {
	if !p.frozenAt.IsZero() && now.After(p.frozenAt) {
		now = p.frozenAt
	}
	kept := p.jobs[:0]
	for _, it := range p.jobs {
		if it.end.After(now) {
			kept = append(kept, it)
		}
	}
	clear(p.jobs[len(kept):])
	p.jobs = kept
	return len(kept)
}

// Probes returns the number of /idle requests the policy has received,
// answered or not.
func (p *Policy) Probes() uint64 { return p.probes.Load() }

// Works returns the number of work items the policy has been given.
func (p *Policy) Works() uint64 { return p.works.Load() }

// handler serves the policy on its own listener.
func (p *Policy) handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range routes(p.fleet.opts.Engine) {
		mux.HandleFunc(rt.method+" "+rt.path, func(w http.ResponseWriter, r *http.Request) { rt.h(p, w, r) })
	}
	return mux
}

// wait waits for d, the request's end or the fleet's closing; it reports
// whether d passed.
func (p *Policy) wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
	case <-p.fleet.closed:
	}
	return false
}

// idleBody is the answer of GET /idle in ModeNormal.
type idleBody struct {
	Idle    bool  `json:"idle"`
	Load    int   `json:"load"`
	Version int64 `json:"version,omitempty"` // 0: the policy reports no version
}

func (p *Policy) serveIdle(w http.ResponseWriter, r *http.Request) {
	p.probes.Add(1)
	if !p.wait(r, time.Duration(p.delay.Load())) {
		return
	}
	mode := p.Mode()
	if mode == ModeFlap {
		n := p.flaps.Add(1) - 1
		if (n/uint64(p.fleet.opts.FlapProbes))%2 == 1 {
			mode = ModeFail
		} else {
			mode = ModeNormal
		}
	}
	switch mode {
	case ModeHang:
		select {
		case <-r.Context().Done():
		case <-p.fleet.closed:
		}
	case ModeFail:
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "simulated failure"})
	case ModeGarbage:
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("<html>not an idle answer</html>\n"))
	case ModeBare:
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, "%t\n", p.Idle())
	default:
		load := p.Load()
		writeJSON(w, http.StatusOK, idleBody{Idle: load == 0, Load: load, Version: p.version.Load()})
	}
}

// workBody is the answer of POST /work and POST /generate.
type workBody struct {
	Index  int     `json:"index"`
	BusyMS float64 `json:"busy_ms"`
	Load   int     `json:"load"`
	// PrefixHit is set for a /generate whose session's prefix the policy
	// had cached.
	PrefixHit bool `json:"prefix_hit,omitempty"`
}

// serveWork starts a work item and answers 202 at once.
func (p *Policy) serveWork(w http.ResponseWriter, _ *http.Request) {
	d := p.StartWork()
	writeJSON(w, http.StatusAccepted, workBody{Index: p.index, BusyMS: ms(d), Load: p.Load()})
}

// serveGenerate serves SGLang's native POST /generate (openai.go): the
// work takes a work item's duration (shortened by Options.PrefixSpeedup
// when the session's prefix is cached) and the answer comes when it is
// done (queued behind the work ahead with Options.Serial), or 503 when the
// fleet closes first. A client that gives up ends the work of a simulated
// engine at once, as SGLang and vLLM abort a disconnected request; a plain
// policy stays busy until the work's end, like a server that cannot
// cancel. The session is
// the JSON body's session_id or the query's session.
func (p *Policy) serveGenerate(w http.ResponseWriter, r *http.Request) {
	p.generate(w, r, kindGenerate)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
