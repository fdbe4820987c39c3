package fakepolicy

import "time"

// A busyLedger is a policy's own account of the time it has spent working:
// the length of the union of its work items' intervals, so that items that
// run side by side count once. Items must be added in non-decreasing order
// of start, which holds because each starts at the fleet's clock's now or,
// with Options.Serial, at the end of the work ahead of it.
type busyLedger struct {
	from, to time.Time     // the latest busy period; zero before the first item
	done     time.Duration // the busy time of the periods before it
}

// add records an item that works from start to end.
func (b *busyLedger) add(start, end time.Time) {
	switch {
	case b.to.IsZero() || start.After(b.to):
		b.done += b.to.Sub(b.from)
		b.from, b.to = start, end
	case end.After(b.to):
		b.to = end
	}
}

// at returns the busy time up to now: work scheduled after now does not
// count yet.
func (b *busyLedger) at(now time.Time) time.Duration {
	if b.to.IsZero() || !now.After(b.from) {
		return b.done
	}
	end := b.to
	if now.Before(end) {
		end = now
	}
	return b.done + end.Sub(b.from)
}

// BusyTime returns how long the policy has been working since it started,
// by the fleet's clock: the time during which it had at least one work item
// in progress.
func (p *Policy) BusyTime() time.Duration {
	now := p.fleet.opts.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.busyAtLocked(now)
}

// BusyTimes returns every policy's BusyTime, in index order, read at one
// instant of the fleet's clock.
func (f *Fleet) BusyTimes() []time.Duration {
	now := f.opts.Now()
	out := make([]time.Duration, len(f.policies))
	for i, p := range f.policies {
		p.mu.Lock()
		out[i] = p.busyAtLocked(now)
		p.mu.Unlock()
	}
	return out
}
