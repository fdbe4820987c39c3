package handlers

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/policyrouter/policyrouter/api"
)

// Returning reports whether the policy with the given id is out of
// routing by the router's own doing, and by when it is due back: a
// rolling update of this router draining or updating it
// (updates.Manager.Returning), or POST /fleet/sleep (its resume_within_ms,
// recorded in the routing state). The later of the two bounds wins.
func (l stateLeaser) Returning(_ context.Context, policyID string) (until time.Time, ok bool) {
	if m := l.s.Updates; m != nil {
		until, ok = m.Returning(policyID)
	}
	if slept, asleep := l.s.State.Returning(policyID, time.Now()); asleep && slept.After(until) {
		until, ok = slept, true
	}
	return until, ok
}

// Returning is the state's answer while this replica leads, whose update
// manager and fleet verbs took the policies out; a follower asks the
// leader. When it cannot (no leader, or it does not answer in time) the
// answer is not: an aborted generation then ends with its tokens so far
// when no other policy can go on with it.
func (l *replicaLeaser) Returning(ctx context.Context, policyID string) (time.Time, bool) {
	leading, leader := l.s.Leader()
	if leading {
		return stateLeaser{l.s}.Returning(ctx, policyID)
	}
	if leader == "" {
		return time.Time{}, false
	}
	cctx, cancel := context.WithTimeout(ctx, replicaCallTimeout)
	defer cancel()
	var out api.Returning
	asked := time.Now()
	if err := l.call(cctx, http.MethodGet, leader, "/internal/returning/"+url.PathEscape(policyID), false, nil, &out); err != nil || !out.Returning {
		return time.Time{}, false
	}
	return asked.Add(time.Duration(out.WithinMS) * time.Millisecond), true
}
