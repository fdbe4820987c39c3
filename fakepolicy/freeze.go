package fakepolicy

import (
	"net/http"
	"time"
)

// A paused engine holds its work as the real engines do:
//
//   - SGLang's pause_generation in mode "in_place" only sets the
//     scheduler's _engine_paused flag, leaving the running batch and its
//     KV cache untouched, and "retract" moves the running requests back to
//     the waiting queue; while the flag is set the event loop launches no
//     batch, so neither makes progress until continue_generation
//     (sgl-project/sglang python/sglang/srt/managers/scheduler.py,
//     Scheduler.pause_generation and the event loop's
//     "if self._engine_paused: continue");
//   - vLLM's pause mode "keep": "Freeze requests in queue; they resume on
//     resume_generation()" (vllm-project/vllm vllm/v1/engine/__init__.py,
//     PauseMode);
//   - in every mode, a request that arrives while paused waits for the
//     resume before it starts.
//
// A freeze stops the clock of the policy's unfinished work: at the thaw
// every item still running at the freeze ends later by the freeze's
// length, and the busy ledger does not count it (loading weights meanwhile
// is not generating).

// freeze stops the policy's work at the fleet's clock's now, and holds
// new work until the thaw; a second freeze before the thaw does nothing.
func (p *Policy) freeze() {
	now := p.fleet.opts.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdNewLocked()
	if p.frozenAt.IsZero() {
		p.frozenAt = now
	}
}

// freezeNew holds new work until the thaw, and lets the work in flight
// run on.
func (p *Policy) freezeNew() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdNewLocked()
}

// holdNewLocked makes gate wait. Caller must hold mu.
func (p *Policy) holdNewLocked() {
	if p.thawed == nil {
		p.thawed = make(chan struct{})
	}
}

// waitThawed waits while the policy is frozen: a stream, like the work it
// stands for, makes no progress until the thaw. It returns an outcome of
// waitGen: genDone at once when the policy is not frozen.
func (p *Policy) waitThawed(r *http.Request, abort <-chan struct{}) int {
	p.mu.Lock()
	frozen, thawed := !p.frozenAt.IsZero(), p.thawed
	p.mu.Unlock()
	if !frozen || thawed == nil {
		return genDone
	}
	return waitUntil(p, r, thawed, abort)
}

// thaw restarts the work a freeze stopped, and lets the requests that
// arrived meanwhile start.
func (p *Policy) thaw() {
	now := p.fleet.opts.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thawed != nil {
		close(p.thawed)
		p.thawed = nil
	}
	if p.frozenAt.IsZero() {
		return
	}
	d := now.Sub(p.frozenAt)
	for _, it := range p.jobs {
		if it.end.After(p.frozenAt) {
			it.end = it.end.Add(d)
		}
	}
	if p.busy.to.After(p.frozenAt) {
		// The ledger's period ran across the freeze: it ends later, and
		// the freeze is not busy time.
		p.busy.to = p.busy.to.Add(d)
		p.busy.done -= d
	}
	p.frozenFor += d
	p.frozenAt = time.Time{}
}

// busyAtLocked is the busy time up to now; while frozen, up to the freeze.
// Caller must hold mu.
func (p *Policy) busyAtLocked(now time.Time) time.Duration {
	if !p.frozenAt.IsZero() && now.After(p.frozenAt) {
		now = p.frozenAt
	}
	return p.busy.at(now)
}

// gate waits, for a request, until the policy is not frozen; it reports
// false when the request or the fleet ended first.
func (p *Policy) gate(r *http.Request) bool {
	for {
		p.mu.Lock()
		thawed := p.thawed
		p.mu.Unlock()
		if thawed == nil {
			return true
		}
		select {
		case <-thawed:
		case <-r.Context().Done():
			return false
		case <-p.fleet.closed:
			return false
		}
	}
}

// waitEnd waits for a work item that ends at end to be done, freezes
// included (each moves its end by its length), or for abort; it returns
// one of genDone, genAborted or genGone.
func (p *Policy) waitEnd(r *http.Request, end time.Time, abort <-chan struct{}) int {
	p.mu.Lock()
	base := p.frozenFor
	p.mu.Unlock()
	for {
		if out := p.waitGen(r, end.Sub(p.fleet.opts.Now()), abort); out != genDone {
			return out
		}
		p.mu.Lock()
		frozen, thawed := !p.frozenAt.IsZero() && end.After(p.frozenAt) && p.thawed != nil, p.thawed
		shift := p.frozenFor - base
		base = p.frozenFor
		p.mu.Unlock()
		if frozen {
			select {
			case <-thawed:
				continue // its end moved: read the shift then
			case <-abort:
				return genAborted
			case <-r.Context().Done():
				return genGone
			case <-p.fleet.closed:
				return genGone
			}
		}
		if shift == 0 {
			return genDone
		}
		end = end.Add(shift)
	}
}
