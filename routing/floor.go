package routing

// Floor is what a weight-version floor leaves routable: of the policies
// that pass the availability filter (healthy, not draining, heard from),
// how many have a version at or above it, and the highest version among
// them. A floor that none of them meets stops all routing that names no
// floor of its own, silently unless someone says so: /readyz, /stats and
// the status command read it.
type Floor struct {
	MinVersion int64 // the floor; 0 means none
	Routable   int   // policies passing the availability filter
	Meeting    int   // routable policies with a version >= MinVersion
	Highest    int64 // the highest version among the routable ones; 0 with none
}

// Met reports whether the floor leaves work to route: there is none, or a
// routable policy meets it. With no routable policy at all it is met: the
// floor is not what stops routing then, and Availability says what is.
func (f Floor) Met() bool { return f.MinVersion == 0 || f.Routable == 0 || f.Meeting > 0 }

// FloorOf returns the Floor of floor over policies, as Stats returns them.
// It reads only their Available and Version, so it agrees with the rest
// of that Stats (per-policy rows shown beside it).
func FloorOf(floor int64, policies []PolicyStats) Floor {
	f := Floor{MinVersion: max(floor, 0)}
	for i := range policies {
		p := &policies[i]
		if !p.Available {
			continue
		}
		f.Routable++
		if p.Version >= f.MinVersion {
			f.Meeting++
		}
		f.Highest = max(f.Highest, p.Version)
	}
	return f
}

// Floor returns the Floor of the floor in force (SetMinVersion) over the
// registered policies, from one Stats pass.
func (st *State) Floor() Floor { return FloorOf(st.MinVersion(), st.Stats().Policies) }
