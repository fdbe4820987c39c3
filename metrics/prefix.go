package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/policyrouter/policyrouter/routing"
)

// The prefix score stage's counters (routing/score_prefix.go), read from
// the routing state at scrape time. Tokens are counted as blocks of 16
// (prefix.BlockTokens): exact for token prompts; text prompts, hashed in
// blocks of bytes, are counted in the same unit for now.
var (
	prefixMatchedDesc = prometheus.NewDesc("policyrouter_prefix_matched_tokens_total",
		"Prompt tokens the router expected cached on the chosen policy (confirmed blocks × 16), over decisions with prefix hashes.", nil, nil)
	prefixPromptDesc = prometheus.NewDesc("policyrouter_prefix_prompt_tokens_total",
		"Prompt tokens of the decisions with prefix hashes (blocks × 16).", nil, nil)
	prefixDecisionsDesc = prometheus.NewDesc("policyrouter_prefix_decisions_total",
		"Routing decisions by prefix outcome: hit (the longest cached match), miss (no policy held any block), balanced (the load bound, a session's home or the waiters' order sent it elsewhere), none (no hashes).", []string{"outcome"}, nil)
)

func describePrefix(ch chan<- *prometheus.Desc) {
	ch <- prefixMatchedDesc
	ch <- prefixPromptDesc
	ch <- prefixDecisionsDesc
}

func collectPrefix(ch chan<- prometheus.Metric, state *routing.State) {
	ps := state.PrefixStats()
	ch <- prometheus.MustNewConstMetric(prefixMatchedDesc, prometheus.CounterValue, float64(ps.MatchedTokens))
	ch <- prometheus.MustNewConstMetric(prefixPromptDesc, prometheus.CounterValue, float64(ps.PromptTokens))
	for _, o := range routing.PrefixOutcomes {
		ch <- prometheus.MustNewConstMetric(prefixDecisionsDesc, prometheus.CounterValue, float64(ps.Decisions[o]), o)
	}
}
