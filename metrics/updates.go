package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/policyrouter/policyrouter/updates"
)

// updateMetrics follow rolling updates: the policies of the latest update
// by phase, its waves, whether it runs, the failures, and how long
// policies spend in each phase.
type updateMetrics struct {
	policies  *prometheus.GaugeVec
	waves     prometheus.Gauge
	running   prometheus.Gauge
	failures  prometheus.Counter
	durations *prometheus.HistogramVec

	mu      sync.Mutex
	id      string
	failed  int
	phaseOf map[string]updates.Policy // the latest update's policies as last seen
}

func newUpdateMetrics() *updateMetrics {
	u := &updateMetrics{
		policies: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "policyrouter_update_policies",
			Help: "Policies of the latest rolling update by phase (pending, draining, updating, done, failed).",
		}, []string{"phase"}),
		waves: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "policyrouter_update_waves",
			Help: "Waves the latest rolling update has started.",
		}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "policyrouter_update_running",
			Help: "1 while a rolling update runs.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "policyrouter_update_failures_total",
			Help: "Policies whose update failed (they stay drained).",
		}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "policyrouter_update_phase_duration_seconds",
			Help:    "Time policies spent in a rolling update's phase: draining (waiting for their work to end) and updating (loading the weights).",
			Buckets: []float64{.01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900},
		}, []string{"phase"}),
		phaseOf: map[string]updates.Policy{},
	}
	for _, ph := range updates.Phases {
		u.policies.WithLabelValues(ph)
	}
	for _, ph := range []string{updates.PhaseDraining, updates.PhaseUpdating} {
		u.durations.WithLabelValues(ph)
	}
	return u
}

func (u *updateMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{u.policies, u.waves, u.running, u.failures, u.durations}
}

// ObserveUpdate records a change of a rolling update; pass it as the
// update manager's OnChange.
func (m *Metrics) ObserveUpdate(up updates.Update) {
	u := m.updates
	u.mu.Lock()
	defer u.mu.Unlock()
	if up.ID != u.id {
		u.id, u.failed, u.phaseOf = up.ID, 0, map[string]updates.Policy{}
	}
	counts := map[string]int{}
	for _, p := range up.Policies {
		counts[p.Phase]++
		if before, ok := u.phaseOf[p.ID]; ok && before.Phase != p.Phase &&
			(before.Phase == updates.PhaseDraining || before.Phase == updates.PhaseUpdating) {
			u.durations.WithLabelValues(before.Phase).Observe(p.Since.Sub(before.Since).Seconds())
		}
		u.phaseOf[p.ID] = *p
	}
	for _, ph := range updates.Phases {
		u.policies.WithLabelValues(ph).Set(float64(counts[ph]))
	}
	u.waves.Set(float64(up.Waves))
	if up.State == updates.StateRunning {
		u.running.Set(1)
	} else {
		u.running.Set(0)
	}
	if up.Failures > u.failed {
		u.failures.Add(float64(up.Failures - u.failed))
		u.failed = up.Failures
	}
}
