package routing

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// A failed probe's kind is kept beside its text, cleared with it when the
// policy is healthy again, and reads "other" for a failure recorded
// without a kind.
func TestLastErrorKind(t *testing.T) {
	now := time.Now()
	st := newState(t, Options{Polled: true, FailThreshold: 1, PassThreshold: 1}, densePolicies(1), Topology{})
	kind := func() (string, string) {
		ps, _ := st.PolicyStats("p0")
		return ps.LastError, ps.LastErrorKind
	}
	steps := []struct {
		name     string
		do       func()
		wantErr  string
		wantKind string
	}{
		{"before any probe", func() {}, "", ""},
		{"refused", func() {
			st.ObserveProbe("p0", Probe{SentAt: now, Err: "dial: connection refused", ErrKind: ErrKindConnectRefused})
		}, "dial: connection refused", ErrKindConnectRefused},
		{"status", func() {
			st.ObserveProbe("p0", Probe{SentAt: now, Err: "GET /idle: status 503", ErrKind: ErrKindStatus(503)})
		}, "GET /idle: status 503", "status_503"},
		{"proxy failure, no kind", func() { st.ObserveFailure("p0", now, "proxy: reset") }, "proxy: reset", ErrKindOther},
		{"probe without a kind", func() { st.ObserveProbe("p0", Probe{SentAt: now, Err: "boom"}) }, "boom", ErrKindOther},
		{"healthy again", func() { st.ObserveProbe("p0", Probe{SentAt: now, OK: true, Idle: true}) }, "", ""},
		{"unknown id ignored", func() { st.ObserveProbe("nope", Probe{SentAt: now, Err: "x", ErrKind: ErrKindDNS}) }, "", ""},
	}
	for _, s := range steps {
		s.do()
		if gotErr, gotKind := kind(); gotErr != s.wantErr || gotKind != s.wantKind {
			t.Errorf("%s: last error %q, kind %q; want %q, %q", s.name, gotErr, gotKind, s.wantErr, s.wantKind)
		}
	}
}

// Availability groups the unavailable policies' errors by kind: many
// texts that differ by URL are one cause, with its count and the lowest
// index's text as the example; the most frequent cause comes first.
func TestAvailabilityCauses(t *testing.T) {
	now := time.Now()
	st := newState(t, Options{Polled: true, FailThreshold: 1}, densePolicies(8), Topology{})
	st.ObserveProbe("p0", Probe{SentAt: now, OK: true, Idle: true})
	st.ObserveProbe("p1", Probe{SentAt: now, Err: "GET http://policy-1/idle: status 500", ErrKind: ErrKindStatus(500)})
	for i := 2; i < 6; i++ {
		st.ObserveProbe(fmt.Sprintf("p%d", i), Probe{SentAt: now,
			Err: fmt.Sprintf("GET http://policy-%d/idle: connection refused", i), ErrKind: ErrKindConnectRefused})
	}
	st.ObserveProbe("p6", Probe{SentAt: now, Err: "GET http://policy-6/idle: timeout", ErrKind: ErrKindTimeout})
	// p7 is unknown: no error, no cause.
	got := st.Availability().Causes
	want := []Cause{
		{Kind: ErrKindConnectRefused, Count: 4, Example: "GET http://policy-2/idle: connection refused"},
		{Kind: "status_500", Count: 1, Example: "GET http://policy-1/idle: status 500"},
		{Kind: ErrKindTimeout, Count: 1, Example: "GET http://policy-6/idle: timeout"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Causes = %+v\nwant %+v", got, want)
	}
	if got := New(Options{}).Availability().Causes; got != nil {
		t.Errorf("no policies: Causes = %+v; want none", got)
	}
}
