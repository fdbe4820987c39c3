package main

import (
	"fmt"

	"github.com/policyrouter/policyrouter/internal/benchkit"
	dto "github.com/prometheus/client_model/go"
)

// The router's histograms that say how long it spent inside the server.
const (
	decisionMetric = "policyrouter_decision_duration_seconds"     // routing.State call of /assign and /select
	requestMetric  = "policyrouter_http_request_duration_seconds" // the handler chain, from logging middleware down
)

// aimSeconds is the aim for the server time of a big /assign.
const aimSeconds = 0.0005

// histTotals adds up every series of one histogram family, or of the
// series whose label name has the value want ("" for all).
type histTotals struct {
	Sum     float64
	Count   uint64
	UnderAt uint64 // observations <= aimSeconds (a bucket bound of both histograms)
}

func (h histTotals) minus(o histTotals) histTotals {
	return histTotals{Sum: h.Sum - o.Sum, Count: h.Count - o.Count, UnderAt: h.UnderAt - o.UnderAt}
}

// serverSample is the router's histograms at one moment.
type serverSample struct {
	Decision histTotals
	Request  histTotals
	Probes   uint64
}

// sampleServer reads the router's histograms: decisions of the given
// endpoint ("select" or "assign") and requests of every route.
func sampleServer(r *benchkit.Router, endpoint string) (serverSample, error) {
	fams, err := r.Metrics.Registry().Gather()
	if err != nil {
		return serverSample{}, fmt.Errorf("gather metrics: %w", err)
	}
	var s serverSample
	for _, f := range fams {
		switch f.GetName() {
		case decisionMetric:
			s.Decision = addHist(f, "endpoint", endpoint)
		case requestMetric:
			s.Request = addHist(f, "", "")
		}
	}
	if r.App.Poller != nil {
		s.Probes = r.App.Poller.Stats().ProbesTotal
	}
	return s, nil
}

func addHist(f *dto.MetricFamily, label, want string) histTotals {
	var t histTotals
	for _, m := range f.GetMetric() {
		if label != "" && !hasLabel(m, label, want) {
			continue
		}
		h := m.GetHistogram()
		t.Sum += h.GetSampleSum()
		t.Count += h.GetSampleCount()
		for _, b := range h.GetBucket() {
			// Bounds are float64 literals in both histograms; compare with
			// a little slack for their binary form.
			if b.GetUpperBound() > aimSeconds*0.999 && b.GetUpperBound() < aimSeconds*1.001 {
				t.UnderAt += b.GetCumulativeCount()
			}
		}
	}
	return t
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

// serverTime is what the router's histograms say about one router phase.
type serverTime struct {
	// HandlerMeanMS is the mean time of one request in the handler chain
	// (decode, validate, route, encode; not the network or net/http's own
	// parsing), from policyrouter_http_request_duration_seconds.
	HandlerMeanMS float64 `json:"handler_mean_ms"`
	// HandlerUnderAim is the share of requests whose handler time was at
	// most 0.5 ms.
	HandlerUnderAim float64 `json:"handler_under_0_5ms"`
	// DecisionMeanMS is the mean time of the routing.State call, from
	// policyrouter_decision_duration_seconds.
	DecisionMeanMS float64 `json:"decision_mean_ms"`
	// DecisionUnderAim is the share of decisions that took at most 0.5 ms.
	DecisionUnderAim float64 `json:"decision_under_0_5ms"`
	// ProbesPerSecond is the poller's rate during the phase.
	ProbesPerSecond float64 `json:"probes_per_second"`
}

func newServerTime(before, after serverSample, seconds float64) serverTime {
	d, r := after.Decision.minus(before.Decision), after.Request.minus(before.Request)
	var st serverTime
	if r.Count > 0 {
		st.HandlerMeanMS = r.Sum / float64(r.Count) * 1e3
		st.HandlerUnderAim = float64(r.UnderAt) / float64(r.Count)
	}
	if d.Count > 0 {
		st.DecisionMeanMS = d.Sum / float64(d.Count) * 1e3
		st.DecisionUnderAim = float64(d.UnderAt) / float64(d.Count)
	}
	if seconds > 0 {
		st.ProbesPerSecond = float64(after.Probes-before.Probes) / seconds
	}
	return st
}
