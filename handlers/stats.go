package handlers

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/poller"
	"github.com/policyrouter/policyrouter/routing"
)

// stats renders GET /stats from one pass over the routing state. A
// follower, which does not poll, answers with the leader's stats instead,
// saying so, unless the leader cannot be reached.
func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	if s.Leader != nil && r.Header.Get(api.FromFollowerHeader) == "" {
		if leading, leader := s.Leader(); !leading && leader != "" {
			if st, ok := s.leaderStats(r, leader); ok {
				st.Replica = &api.ReplicaStats{Leading: false, Leader: leader, StatsFrom: leader}
				writeJSON(w, http.StatusOK, st)
				return
			}
		}
	}
	writeJSON(w, http.StatusOK, s.buildStats())
}

// leaderStatsTimeout bounds a follower's request for the leader's stats.
const leaderStatsTimeout = 2 * time.Second

// leaderStats asks the leader for its /stats with the caller's
// credentials (the replicas share their token keys).
func (s *Server) leaderStats(r *http.Request, leader string) (api.Stats, bool) {
	ctx, cancel := context.WithTimeout(r.Context(), leaderStatsTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(leader, "/")+"/stats", nil)
	if err != nil {
		return api.Stats{}, false
	}
	req.Header.Set(api.FromFollowerHeader, "1")
	if a := r.Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	res, err := s.peers.Do(req)
	if err != nil {
		s.logger.Debug("follower: leader's stats", "leader", leader, "err", err)
		return api.Stats{}, false
	}
	defer res.Body.Close()
	var st api.Stats
	if res.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(res.Body, 64<<20)).Decode(&st) != nil {
		return api.Stats{}, false
	}
	return st, true
}

func (s *Server) buildStats() api.Stats {
	st := s.State.Stats()
	now := s.Now()
	out := api.Stats{
		Policies:           make([]api.PolicyStats, len(st.Policies)),
		Nodes:              make(map[string]api.StateCounts),
		Waiters:            st.Waiters,
		Leases:             st.Leases,
		LeasesEnded:        st.LeasesEnded,
		OldestLeaseSeconds: st.OldestLease.Seconds(),
		OldestTaskSeconds:  st.OldestTask.Seconds(),
		Sticky:             stickyStats(st.Sticky),
		Router:             s.DefaultRouter,
		Decisions:          s.decisions.stats(),
		EnvUnmapped:        s.unmapped.stats(),
		Prefix:             prefixStats(s.State.PrefixStats()),
		MinVersion:         s.State.MinVersion(),
		UptimeSeconds:      now.Sub(s.started).Seconds(),
		Time:               now.UTC(),
	}
	f := routing.FloorOf(out.MinVersion, st.Policies)
	out.Floor = &api.FloorStats{Met: f.Met(), Meeting: f.Meeting, Routable: f.Routable, HighestVersion: f.Highest}
	if s.Leader != nil {
		leading, leader := s.Leader()
		out.Replica = &api.ReplicaStats{Leading: leading, Leader: leader}
	}
	if s.Updates != nil {
		if u, ok := s.Updates.Latest(); ok {
			a := updateToAPI(u, now)
			sum := &api.UpdateSummary{ID: a.ID, State: a.State, Version: a.Version, Waves: a.Waves, Failures: a.Failures,
				CapacityHeld: a.CapacityHeld, Phases: map[string]int{}}
			for _, p := range a.Policies {
				sum.Phases[p.Phase]++
			}
			out.Update = sum
		}
	}
	var recent recentProber
	if s.Poller != nil {
		out.Poller = pollerStats(s.Poller.Stats())
		recent, _ = s.Poller.(recentProber)
	}
	var quarantined map[string]string
	if s.Updates != nil {
		quarantined = s.Updates.Quarantined()
	}
	for i, p := range st.Policies {
		updateError, failed := quarantined[p.Policy.ID]
		if failed && p.Draining && p.State == routing.StateDraining {
			p.State = api.StateUpdateFailed // drained by the update that failed it
		} else {
			updateError = ""
		}
		ps := api.PolicyStats{
			Policy:              toAPI(p.Policy, p, true),
			Load:                p.Load,
			Inflight:            p.Inflight,
			Leases:              p.Inflight,
			OutsideLoad:         p.OutsideLoad,
			Occupancy:           p.Occupancy,
			SelectedTotal:       p.Selected,
			AssignedTotal:       p.Assigned,
			CompletedTotal:      p.Completed,
			LatencyMS:           float64(p.LastLatency) / float64(time.Millisecond),
			ConsecutiveFailures: p.FailStreak,
			LastErrorKind:       p.LastErrorKind,
			ProbesTotal:         p.Probes,
			ProbeFailuresTotal:  p.ProbeFailures,
			ExpiredTotal:        p.Expired,
			TasksExpiredTotal:   p.ExpiredTasks,
			LastPoll:            utcOrNil(p.LastProbe),
			UpdateError:         updateError,
		}
		ps.State, ps.Capacity = p.State, p.Capacity // the slots in force, and update_failed
		if p.EngineLoadKnown {
			ps.EngineLoad = &p.EngineLoad
		}
		if recent != nil {
			c := recent.RecentProbes(p.Policy.ID)
			ps.ProbesRecent, ps.ProbeFailuresRecent = c.Probes, c.Failures
		}
		out.Policies[i] = ps
		node := out.Nodes[p.Node]
		count(&node, p)
		out.Nodes[p.Node] = node
		count(&out.Totals, p)
	}
	return out
}

// utcOrNil renders a time for JSON: null when zero.
func utcOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// recentProber is a poller that counts each policy's probes of the last
// poller.Window; *poller.Poller is one.
type recentProber interface {
	RecentProbes(id string) poller.ProbeCounts
}

var _ recentProber = (*poller.Poller)(nil)

func pollerStats(s poller.Stats) *api.PollerStats {
	return &api.PollerStats{
		IntervalMS:     float64(s.Interval) / float64(time.Millisecond),
		TimeoutMS:      float64(s.Timeout) / float64(time.Millisecond),
		Concurrency:    s.Concurrency,
		Policies:       s.Policies,
		Sweeps:         s.Sweeps,
		ProbesTotal:    s.ProbesTotal,
		FailuresTotal:  s.FailuresTotal,
		ProbesRecent:   s.Recent.Probes,
		FailuresRecent: s.Recent.Failures,
		WindowSeconds:  poller.Window.Seconds(),
		SkippedTotal:   s.SkippedTotal,
		InFlight:       s.InFlight,
		LastPeriodMS:   float64(s.LastPeriod) / float64(time.Millisecond),
	}
}

func count(c *api.StateCounts, p routing.PolicyStats) {
	c.Policies++
	switch p.State {
	case routing.StateIdle:
		c.Idle++
	case routing.StateBusy:
		c.Busy++
	case routing.StateUnhealthy:
		c.Unhealthy++
	case routing.StateDraining:
		c.Draining++
	case routing.StateUnknown:
		c.Unknown++
	case routing.StatePaused:
		c.Paused++
	case routing.StateAsleep:
		c.Asleep++
	case api.StateUpdateFailed:
		c.UpdateFailed++
	}
	c.Load += p.Load
	c.Inflight += p.Inflight
	c.Capacity += p.Capacity
	c.SelectedTotal += p.Selected
	c.AssignedTotal += p.Assigned
}

func stickyStats(s routing.StickyStats) api.StickyStats {
	out := api.StickyStats{Hits: s.Hits, Spills: s.Spills, Misses: s.Misses}
	if n := s.Hits + s.Spills + s.Misses; n > 0 {
		out.HitRate = float64(s.Hits) / float64(n)
	}
	return out
}
