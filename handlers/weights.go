package handlers

import (
	"strconv"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/store"
)

// checkFloor refuses, with 409 conflict, a PUT /weights whose floor no
// registered policy meets, unless it says "force": all routing would stop
// until policies reach the floor, which is rarely what the caller meant
// (a version counted from 1 against policies reporting steps, a
// max_staleness forgotten). The answer says how many policies meet it.
// A follower does not check: it does not poll, so it knows only the
// registered versions, not those the policies report.
func (s *Server) checkFloor(req api.WeightsRequest) error {
	if req.Force || s.State == nil {
		return nil
	}
	if s.Leader != nil {
		if leading, _ := s.Leader(); !leading {
			return nil
		}
	}
	floor := store.Weights{Version: *req.Version, MaxStaleness: req.MaxStaleness}.MinVersion()
	n, total, highest := s.State.AtVersion(floor)
	if floor == 0 || total == 0 || n > 0 {
		return nil
	}
	return &Error{
		Code: api.CodeConflict,
		Message: "floor " + strconv.FormatInt(floor, 10) + " (version - max_staleness) excludes every policy: 0 of " +
			nPolicies(total) + " have a weight version of at least " + strconv.FormatInt(floor, 10) +
			" (the highest is " + strconv.FormatInt(highest, 10) + "), so all routing would stop; " +
			"raise max_staleness, update the policies first (POST /updates with set_floor), or send \"force\": true",
		Details: &api.ErrorDetails{Policies: total, MeetingFloor: &n},
	}
}

// floorUnmet returns the floor_unmet error of /readyz when f is unmet:
// policies are routable but none has reached the floor in force, so
// every decision that names no floor of its own waits (or fails with
// no_fresh_policy) until one does. registered is how many policies are
// registered. It returns nil when f is met.
func floorUnmet(f routing.Floor, registered int) *Error {
	if f.Met() {
		return nil
	}
	floor, highest, meeting := f.MinVersion, f.Highest, f.Meeting
	who := "none of the " + strconv.Itoa(f.Routable) + " policies that can route meets it"
	if f.Routable == 1 {
		who = "the one policy that can route does not meet it"
	}
	return &Error{
		Code: api.CodeFloorUnmet,
		Message: "not ready: weight-version floor " + strconv.FormatInt(floor, 10) + " (PUT /weights: version - max_staleness): " +
			who + "; the highest version present is " + strconv.FormatInt(highest, 10) +
			", so all routing waits: update the policies (POST /updates), or lower the floor with PUT /weights",
		Details: &api.ErrorDetails{Policies: registered, MeetingFloor: &meeting, MinVersion: &floor, HighestVersion: &highest},
	}
}
