package handlers

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
)

// maxUnmappedEnvs caps the env ids remembered (and logged one by one) as
// mapping to no node: a caller that sends a new id per request costs a
// bounded set, and past the cap only the count grows.
const maxUnmappedEnvs = 1024

// shownUnmappedEnvs is how many of them /stats lists.
const shownUnmappedEnvs = 16

// unmappedEnvs counts the env ids of node-affine decisions that map to no
// node of the topology: those requests lose their node affinity silently
// otherwise. Each id is logged once, up to maxUnmappedEnvs ids.
type unmappedEnvs struct {
	total atomic.Uint64
	mu    sync.Mutex
	seen  map[string]struct{} // guarded by mu
	order []string            // the first shownUnmappedEnvs ids seen; guarded by mu
	full  bool                // the cap was reached and said so; guarded by mu
}

// noteUnmapped counts the env ids of envIDs that snap maps to no node, for
// a decision of a node-affine router; it logs each id the first time.
func (s *Server) noteUnmapped(ctx context.Context, snap *routing.Snapshot, envIDs ...string) {
	if snap == nil {
		return
	}
	for _, env := range envIDs {
		if env != "" && snap.EnvNode(env) == "" {
			s.unmappedEnv(ctx, env)
		}
	}
}

// unmappedEnv counts one request for env, which maps to no node.
func (s *Server) unmappedEnv(ctx context.Context, env string) {
	u := &s.unmapped
	u.total.Add(1)
	if s.Metrics != nil {
		s.Metrics.ObserveEnvUnmapped()
	}
	u.mu.Lock()
	_, seen := u.seen[env]
	first, full := !seen && len(u.seen) < maxUnmappedEnvs, false
	if first {
		if u.seen == nil {
			u.seen = make(map[string]struct{})
		}
		u.seen[env] = struct{}{}
		if len(u.order) < shownUnmappedEnvs {
			u.order = append(u.order, env)
		}
	} else if !seen && !u.full {
		u.full, full = true, true
	}
	u.mu.Unlock()
	switch {
	case first:
		s.logger.LogAttrs(ctx, slog.LevelWarn, "env_id maps to no node: its requests get no node affinity (an env id must end in an env worker index that PUT /topology places on a node, e.g. env-3); logged once per env_id",
			slog.String("env_id", env), slog.String("request_id", RequestIDFromContext(ctx)))
	case full:
		s.logger.LogAttrs(ctx, slog.LevelWarn, "more env_ids map to no node than are logged one by one; policyrouter_env_unmapped_total and /stats keep counting",
			slog.Int("logged", maxUnmappedEnvs), slog.String("env_id", env))
	}
}

// stats returns the figures of /stats.
// anyUnmapped reports whether one of envIDs maps to no node of snap.
func anyUnmapped(snap *routing.Snapshot, envIDs []string) bool {
	if snap == nil {
		return false
	}
	for _, id := range envIDs {
		if snap.EnvNode(id) == "" {
			return true
		}
	}
	return false
}

func (u *unmappedEnvs) stats() api.EnvUnmappedStats {
	u.mu.Lock()
	defer u.mu.Unlock()
	return api.EnvUnmappedStats{Total: u.total.Load(), Distinct: len(u.seen), IDs: append([]string{}, u.order...)}
}
