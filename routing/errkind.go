package routing

import (
	"cmp"
	"slices"
	"strconv"
)

// Cause kinds of a failed probe (Probe.ErrKind, PolicyStats.LastErrorKind):
// why it failed, without the policy's URL, so that a fleet that fails for
// one reason shows one cause. The poller classifies its errors; a
// non-2xx answer is ErrKindStatus of its code.
const (
	ErrKindConnectRefused = "connect_refused"
	ErrKindTimeout        = "timeout"
	ErrKindDecode         = "decode" // a 2xx answer that is not the engine's contract
	ErrKindTLS            = "tls"
	ErrKindDNS            = "dns"
	// ErrKindOther is any other failure, and a failure recorded without a
	// kind (ObserveFailure, or a probe whose ErrKind is empty).
	ErrKindOther = "other"
)

// ErrKindStatus is the cause kind of a non-2xx answer: "status_503".
func ErrKindStatus(code int) string { return "status_" + strconv.Itoa(code) }

// errKindLocked is the cause kind of rt's last error: "" without one,
// else the kind recorded with it, ErrKindOther for a failure recorded
// without a kind. Caller must hold State.mu.
func errKindLocked(rt *policyRuntime) string {
	switch {
	case rt.lastError == "":
		return ""
	case rt.lastErrKind != "":
		return rt.lastErrKind
	default:
		return ErrKindOther
	}
}

// Cause is one cause kind among the policies that are not available: how
// many have a last error of that kind, and one of their errors as an
// example (that of the lowest index).
type Cause struct {
	Kind    string
	Count   int
	Example string
}

// causeTally counts the last errors of unavailable policies by kind.
type causeTally []Cause

// add counts ps's last error, if it has one.
func (t *causeTally) add(ps PolicyStats) {
	if ps.LastError == "" {
		return
	}
	for i := range *t {
		if (*t)[i].Kind == ps.LastErrorKind {
			(*t)[i].Count++
			return
		}
	}
	*t = append(*t, Cause{Kind: ps.LastErrorKind, Count: 1, Example: ps.LastError})
}

// sorted returns the causes, most frequent first; of equally frequent
// ones, the first seen in index order first. Nil when there are none.
func (t causeTally) sorted() []Cause {
	if len(t) == 0 {
		return nil
	}
	slices.SortStableFunc(t, func(a, b Cause) int { return cmp.Compare(b.Count, a.Count) })
	return t
}
