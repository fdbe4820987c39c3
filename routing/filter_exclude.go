package routing

import "slices"

// excludeFilter leaves out the policies a request names in Exclude: those
// a proxied request already failed on.
type excludeFilter struct{}

var _ Filter = excludeFilter{}

func (excludeFilter) Keep(q Query, c Candidate) bool {
	ex := q.Exclude()
	return len(ex) == 0 || !slices.Contains(ex, c.rt.policy.ID)
}
