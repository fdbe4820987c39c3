package poller

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"

	"github.com/policyrouter/policyrouter/routing"
)

// maxNamed is how many policies a health summary names.
const maxNamed = 5

// healthLog gathers the health transitions of one probe round, so that a
// fleet that fails at once (a mistaken registration, a network cut) is
// one log line per round, not one per policy: Run flushes it after each
// period's sweep, and when it returns. Each policy's own transition is
// logged at Debug as it happens. Safe for concurrent use.
type healthLog struct {
	mu sync.Mutex
	healthRound
}

// healthRound is what a healthLog gathered since its last flush.
type healthRound struct {
	down, up  int
	causes    []causeCount // of the policies that became unhealthy, by kind
	namedDown []string     // the first maxNamed of them, "id url"
	namedUp   []string     // the first maxNamed that became healthy
	example   string       // the error of the first that became unhealthy
}

type causeCount struct {
	kind string
	n    int
}

// add records the transition tr of m, caused by a probe that failed with
// err of the given kind (nil, "" for a good probe).
func (h *healthLog) add(m *member, tr routing.Transition, kind string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	name := m.id + " " + m.shown
	switch tr {
	case routing.BecameUnhealthy:
		h.down++
		if len(h.namedDown) < maxNamed {
			h.namedDown = append(h.namedDown, name)
		}
		if h.example == "" && err != nil {
			h.example = err.Error()
		}
		for i := range h.causes {
			if h.causes[i].kind == kind {
				h.causes[i].n++
				return
			}
		}
		h.causes = append(h.causes, causeCount{kind: kind, n: 1})
	case routing.BecameHealthy:
		h.up++
		if len(h.namedUp) < maxNamed {
			h.namedUp = append(h.namedUp, name)
		}
	}
}

// flush logs the transitions gathered since the last flush as one line,
// if there were any: at Warn when a policy became unhealthy, else at
// Info. The line counts the policies by their new state (unhealthy,
// healthy) and the unhealthy ones by cause kind, names the first few
// (those that became unhealthy, else those that recovered) and quotes
// one error.
func (h *healthLog) flush(log *slog.Logger) {
	h.mu.Lock()
	down, up, causes, example := h.down, h.up, h.causes, h.example
	named, total := h.namedDown, down
	if down == 0 {
		named, total = h.namedUp, up
	}
	h.healthRound = healthRound{}
	h.mu.Unlock()
	if down == 0 && up == 0 {
		return
	}
	level, msg := slog.LevelWarn, "policies unhealthy"
	switch {
	case down == 0:
		level, msg = slog.LevelInfo, "policies healthy again"
	case up > 0:
		msg = "policies unhealthy, others healthy again"
	}
	attrs := []slog.Attr{slog.Int("unhealthy", down), slog.Int("healthy", up)}
	if down > 0 {
		slices.SortStableFunc(causes, func(a, b causeCount) int { return cmp.Compare(b.n, a.n) })
		byKind := make([]any, len(causes))
		for i, c := range causes {
			byKind[i] = slog.Int(c.kind, c.n)
		}
		attrs = append(attrs, slog.Group("causes", byKind...))
	}
	attrs = append(attrs, slog.Any("policies", named))
	if total > len(named) {
		attrs = append(attrs, slog.Int("not_named", total-len(named)))
	}
	if example != "" {
		attrs = append(attrs, slog.String("error", example))
	}
	log.LogAttrs(context.Background(), level, msg, attrs...)
}
