package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/updates"
)

// A hang right after a weight update is the most common failure of an RL
// job: a worker that never releases, tasks never completed, an update
// phase that never ends. These gauges show the age of the oldest of each,
// read at each scrape, for the alert rules in deploy/prometheus/rules.yml.

var (
	oldestLeaseDesc = prometheus.NewDesc("policyrouter_oldest_lease_seconds",
		"Age of the oldest /select lease out; 0 when none.", nil, nil)
	oldestTaskDesc = prometheus.NewDesc("policyrouter_oldest_task_seconds",
		"Age of the oldest tracked /assign task neither completed nor expired; 0 when none.", nil, nil)
	leaseTTLDesc = prometheus.NewDesc("policyrouter_lease_ttl_seconds",
		"The lease TTL of /select calls that name none (--lease-ttl); 0: leases do not expire.", nil, nil)
	phaseAgeDesc = prometheus.NewDesc("policyrouter_update_phase_age_seconds",
		"How long the policy longest in a draining or updating phase of the running rolling update has been in it; 0 when none.", nil, nil)
)

// collectHang exports the hang gauges from st, the scrape's one read of
// the routing state.
func (c *stateCollector) collectHang(ch chan<- prometheus.Metric, st routing.Stats) {
	ch <- prometheus.MustNewConstMetric(oldestLeaseDesc, prometheus.GaugeValue, st.OldestLease.Seconds())
	ch <- prometheus.MustNewConstMetric(oldestTaskDesc, prometheus.GaugeValue, st.OldestTask.Seconds())
	ch <- prometheus.MustNewConstMetric(leaseTTLDesc, prometheus.GaugeValue, c.state.LeaseTTL().Seconds())
	ch <- prometheus.MustNewConstMetric(phaseAgeDesc, prometheus.GaugeValue, c.updates.oldestPhase(c.now()).Seconds())
}

// oldestPhase is how long the policy longest in draining or updating has
// been in it, for the latest update as last seen.
func (u *updateMetrics) oldestPhase(now time.Time) time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	var oldest time.Duration
	for _, p := range u.phaseOf {
		if p.Phase == updates.PhaseDraining || p.Phase == updates.PhaseUpdating {
			oldest = max(oldest, now.Sub(p.Since))
		}
	}
	return oldest
}
