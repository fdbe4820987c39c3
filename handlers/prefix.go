package handlers

import (
	"slices"
	"strings"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
)

// Prefix-cache-aware routing in lease mode: /select and /assign take the
// prompt's block hashes (prefix_hashes, decoded as prefix.Hash, whose form
// decodeError names), /release the hashes of prompt and output. The
// routing core scores and records them (routing/score_prefix.go).

// assignedIDs returns the ids of the registered policies a's tasks went
// to, each once, in the order of their first task; indices with no
// registration (stateless mode) are left out.
func assignedIDs(a routing.Assignment) []string {
	if a.Snapshot == nil {
		return nil
	}
	var ids []string
	seen := make(map[int]bool)
	for _, idx := range a.Indices {
		if pos, ok := a.Snapshot.ByIndex(idx); ok && !seen[pos] {
			seen[pos] = true
			ids = append(ids, a.Snapshot.Policies()[pos].ID)
		}
	}
	return ids
}

// prefixStats renders the routing state's prefix index and counts.
func prefixStats(ps routing.PrefixStats) api.PrefixStats {
	out := api.PrefixStats{
		Policies:      make([]api.PrefixPolicyStats, 0, len(ps.Index.Policies)),
		Decisions:     ps.Decisions,
		MatchedTokens: ps.MatchedTokens,
		PromptTokens:  ps.PromptTokens,
		IndexBytes:    ps.Index.IndexBytes,
		MaxBytes:      ps.Index.MaxBytes,
	}
	for _, p := range ps.Index.Policies {
		out.Policies = append(out.Policies, api.PrefixPolicyStats{
			ID: p.ID, IndexedTokens: p.IndexedTokens, PendingTokens: p.PendingTokens,
			CapacityTokens: p.CapacityTokens, Evictions: p.Evictions, Clears: p.Clears,
		})
	}
	slices.SortFunc(out.Policies, func(a, b api.PrefixPolicyStats) int { return strings.Compare(a.ID, b.ID) })
	return out
}
