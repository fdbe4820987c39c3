package routing

// Availability is how many registered policies routing can use, and why
// the others are out: their count per state and their most frequent last
// probe error. /readyz and the all_unavailable answer report it.
type Availability struct {
	Policies  int // registered
	Available int // passing the availability filter (idle or busy)
	// ByState counts the policies in each state of States that has any.
	ByState map[string]int
	// LastError is the most frequent LastError among the policies that are
	// not available ("" when none has one; of equally frequent ones, the
	// first to reach that count in index order),
	// LastErrorCount how many policies share it.
	LastError      string
	LastErrorCount int
	// Causes counts the last errors of the policies that are not
	// available by cause kind, most frequent first, each with one
	// example (errkind.go).
	Causes []Cause
}

// Availability returns the Availability of the registered policies, on one
// pass under the state's lock.
func (st *State) Availability() Availability {
	st.mu.Lock()
	defer st.mu.Unlock()
	snap := st.ledger.snap
	out := Availability{Policies: len(snap.rts), ByState: make(map[string]int, len(States))}
	errs := make(map[string]int)
	var causes causeTally
	for _, rt := range snap.rts {
		ps := statsLocked(rt)
		out.ByState[ps.State]++
		if ps.Available {
			out.Available++
			continue
		}
		causes.add(ps)
		if ps.LastError == "" {
			continue
		}
		errs[ps.LastError]++
		if n := errs[ps.LastError]; n > out.LastErrorCount {
			out.LastError, out.LastErrorCount = ps.LastError, n
		}
	}
	out.Causes = causes.sorted()
	return out
}

// AtVersion returns how many registered policies have a weight version of
// at least floor, out of total, and the highest version of any (0 with
// none): what a weight-version floor of floor would leave routable.
func (st *State) AtVersion(floor int64) (n, total int, highest int64) {
	snap := st.snap.Load()
	for _, rt := range snap.rts {
		v := rt.version.Load()
		if v >= floor {
			n++
		}
		highest = max(highest, v)
	}
	return n, len(snap.rts), highest
}
