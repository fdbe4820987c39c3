// Package fleet runs the fleet verbs: one engine call to every policy a
// selector picks (sleep, wake, or any engine-native call), at bounded
// concurrency, each with its policy's admin key, and the refit lock that
// keeps two such operations off one policy at once.
package fleet

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/routing"
)

// Selector picks policies: those matching every criterion given (ids,
// indices, labels, engine); an empty selector picks every policy. The
// fleet verbs and rolling updates (which store it in their spec) share
// it.
type Selector struct {
	IDs     []string          `json:"ids,omitempty"`
	Indices []int             `json:"indices,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Engine  string            `json:"engine,omitempty"`
}

// Empty reports whether the selector picks every policy.
func (s Selector) Empty() bool {
	return len(s.IDs) == 0 && len(s.Indices) == 0 && len(s.Labels) == 0 && s.Engine == ""
}

// Matches reports whether the selector picks p.
func (s Selector) Matches(p routing.Policy) bool {
	if len(s.IDs) > 0 && !slices.Contains(s.IDs, p.ID) {
		return false
	}
	if len(s.Indices) > 0 && !slices.Contains(s.Indices, p.Index) {
		return false
	}
	if s.Engine != "" && p.EngineName() != s.Engine {
		return false
	}
	for k, v := range s.Labels {
		if p.Labels[k] != v {
			return false
		}
	}
	return true
}

// Select returns the policies of pols the selector picks, in index order.
func (s Selector) Select(pols []routing.Policy) []routing.Policy {
	var out []routing.Policy
	for _, p := range pols {
		if s.Matches(p) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// Locks is the refit lock: while an operation that changes a policy's
// engine (a sleep, a wake, an exclusive fan-out, a rolling update working
// on it) runs on it, another one is refused, naming the holder. Safe for
// concurrent use; the zero value is ready.
type Locks struct {
	mu   sync.Mutex
	held map[string]string // policy id -> holder
}

// HeldError is a refused lock: the policy and who holds it.
type HeldError struct {
	PolicyID string
	Index    int
	Holder   string
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("policy %d (%s) is held by %s", e.Index, e.PolicyID, e.Holder)
}

// Acquire takes the lock of every policy for holder, all or none: the
// first one held already is a *HeldError. The returned func releases
// them.
func (l *Locks) Acquire(pols []routing.Policy, holder string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range pols {
		if h, ok := l.held[p.ID]; ok {
			return nil, &HeldError{PolicyID: p.ID, Index: p.Index, Holder: h}
		}
	}
	if l.held == nil {
		l.held = make(map[string]string)
	}
	for _, p := range pols {
		l.held[p.ID] = holder
	}
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, p := range pols {
			if l.held[p.ID] == holder {
				delete(l.held, p.ID)
			}
		}
	}, nil
}

// Holder returns who holds the policy's lock, if anyone.
func (l *Locks) Holder(id string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.held[id]
	return h, ok
}

// Result is one policy's outcome of a fan-out.
type Result struct {
	Policy routing.Policy
	Call   engine.Call
	// Status and Body are the engine's answer (Body its first
	// engine.MaxReplyBytes); Err a transport failure or why no call was
	// made (the engine has no such call).
	Status int
	Body   []byte
	Err    string
}

// OK reports whether the policy's call answered 2xx.
func (r Result) OK() bool { return r.Err == "" && r.Status >= 200 && r.Status <= 299 }

// Run makes, for each policy, the call callOf returns (false: the engine
// has none, which is a failure naming it), at most conc at once, each
// with the policy's admin key, and returns the results in the policies'
// order. Nothing is retried.
func Run(ctx context.Context, c *engine.Client, pols []routing.Policy, conc int, callOf func(routing.Policy) (engine.Call, bool)) []Result {
	out := make([]Result, len(pols))
	sem := make(chan struct{}, max(conc, 1))
	var wg sync.WaitGroup
	for i, p := range pols {
		out[i].Policy = p
		call, ok := callOf(p)
		if !ok {
			out[i].Err = "engine " + p.EngineName() + " has no such call"
			continue
		}
		out[i].Call = call
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				out[i].Err = ctx.Err().Error()
				return
			}
			defer func() { <-sem }()
			rep, err := c.Send(ctx, p.URL, p.BearerFor(true), call)
			out[i].Status, out[i].Body = rep.Status, rep.Body
			if err != nil {
				out[i].Err = err.Error()
			}
		})
	}
	wg.Wait()
	return out
}

// Describe names a fan-out for the lock's holder: "POST /fleet/sleep".
func Describe(method, path string) string { return strings.ToUpper(method) + " " + path }
