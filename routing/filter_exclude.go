package routing

import "slices"

// excludeFilter leaves out the policies a request names in Exclude: those
// a proxied request already failed on.
type excludeFilter struct{}

var _ Filter = excludeFilter{}

func (excludeFilter) Keep(q Query, c Candidate) bool {
	return len(q.Exclude) == 0 || !slices.Contains(q.Exclude, c.rt.policy.ID)
}
