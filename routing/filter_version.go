package routing

// versionFilter keeps policies whose weight version meets the request's
// floor and their own hold (a policy that joined during a rolling update
// gets no work below the update's version).
type versionFilter struct{}

var _ Filter = versionFilter{}

func (versionFilter) Keep(q Query, c Candidate) bool { return c.Fresh(q.Floor()) }
