package routing

import (
	"fmt"
	"slices"
	"strings"
)

// modelFilter keeps the policies that serve the request's model: those
// registered with it, or whose engine reports it; a policy whose models are
// not known yet (none registered, no report) is kept, since nothing says it
// does not.
type modelFilter struct{}

var _ Filter = modelFilter{}

func (modelFilter) Keep(q Query, c Candidate) bool {
	model := q.Model()
	if model == "" {
		return true
	}
	ms := c.Models()
	return ms == nil || slices.Contains(ms, model)
}

// ModelNotFoundError is a decision's answer when no registered policy, of
// any state, serves the request's model: waiting would not help.
type ModelNotFoundError struct {
	Model  string
	Served []string // every model some policy serves, sorted
}

func (e *ModelNotFoundError) Error() string {
	if len(e.Served) == 0 {
		return fmt.Sprintf("no policy serves model %q", e.Model)
	}
	return fmt.Sprintf("no policy serves model %q; served: %s", e.Model, strings.Join(e.Served, ", "))
}

// modelCheckLocked returns a *ModelNotFoundError when q names a model that
// no registered policy serves. Caller must hold State.mu.
func (st *State) modelCheckLocked(q *Query) error {
	model := q.Model()
	if model == "" {
		return nil
	}
	var served []string
	for _, rt := range st.ledger.snap.rts {
		ms := Candidate{rt}.Models()
		if ms == nil || slices.Contains(ms, model) {
			return nil
		}
		served = append(served, ms...)
	}
	slices.Sort(served)
	return &ModelNotFoundError{Model: model, Served: slices.Compact(served)}
}

// ServedModels returns every model id some registered policy serves,
// sorted: what GET /v1/models lists.
func (st *State) ServedModels() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []string
	for _, rt := range st.ledger.snap.rts {
		out = append(out, Candidate{rt}.Models()...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
