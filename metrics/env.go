package metrics

import "github.com/prometheus/client_golang/prometheus"

func newEnvUnmapped() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Name: "policyrouter_env_unmapped_total",
		Help: "Env ids given to a node-affine router that the topology maps to no node (one per task or request): they got no node affinity.",
	})
}

// ObserveEnvUnmapped counts one env id that mapped to no node.
func (m *Metrics) ObserveEnvUnmapped() { m.envUnmapped.Inc() }
