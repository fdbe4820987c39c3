package poller

import (
	"sync"
	"time"
)

// Window is how far back the recent probe counts (Stats.Recent,
// RecentProbes) reach: what a dashboard shows, where a count since start
// would hide a policy that began failing a minute ago behind weeks of
// successes. The lifetime counts stay in Stats and in /metrics.
const Window = 5 * time.Minute

// windowBuckets is how many buckets Window is counted in: the counts
// cover the last Window to within Window/windowBuckets (10 s).
const windowBuckets = 30

// ProbeCounts counts probes and the failed ones among them.
type ProbeCounts struct {
	Probes, Failures uint64
}

// probeWindow counts probes over the last Window, in buckets of
// Window/windowBuckets: a bucket is reset when a probe lands in it a whole
// Window after the probes it holds. Safe for concurrent use.
type probeWindow struct {
	mu      sync.Mutex
	buckets [windowBuckets]struct {
		epoch int64 // the bucket's start, in bucket widths since the Unix epoch
		ProbeCounts
	}
}

// bucketWidth is the span of one bucket.
const bucketWidth = Window / windowBuckets

func epochOf(t time.Time) int64 { return t.UnixNano() / int64(bucketWidth) }

// add counts one probe made at now, failed or not.
func (w *probeWindow) add(now time.Time, failed bool) {
	e := epochOf(now)
	w.mu.Lock()
	defer w.mu.Unlock()
	i := e % windowBuckets
	if i < 0 {
		i += windowBuckets // a clock before 1970
	}
	b := &w.buckets[i]
	if b.epoch != e {
		b.epoch, b.ProbeCounts = e, ProbeCounts{}
	}
	b.Probes++
	if failed {
		b.Failures++
	}
}

// counts returns the probes of the last Window before now.
func (w *probeWindow) counts(now time.Time) ProbeCounts {
	e := epochOf(now)
	w.mu.Lock()
	defer w.mu.Unlock()
	var c ProbeCounts
	for _, b := range w.buckets {
		if b.epoch > e-windowBuckets && b.epoch <= e {
			c.Probes += b.Probes
			c.Failures += b.Failures
		}
	}
	return c
}
