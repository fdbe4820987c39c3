package poller

import (
	"bufio"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/internal/syncbuf"
	"github.com/policyrouter/policyrouter/routing"
)

// logLine is one JSON log line of the poller, the fields the tests read.
type logLine struct {
	Level     string         `json:"level"`
	Msg       string         `json:"msg"`
	Unhealthy int            `json:"unhealthy"`
	Healthy   int            `json:"healthy"`
	Causes    map[string]int `json:"causes"`
	Policies  []string       `json:"policies"`
	NotNamed  int            `json:"not_named"`
	Error     string         `json:"error"`
	ErrorKind string         `json:"error_kind"`
}

func logLines(tb testing.TB, logs *syncbuf.Buffer) []logLine {
	tb.Helper()
	var out []logLine
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			tb.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// A thousand unreachable policies registered at once are a handful of
// Warn lines per probe round, not one per policy: each round's changes
// are one line that counts them by cause and names the first few; each
// policy's own change is at Debug. (A round's line counts the changes its
// probes reported by the next round's start: on a slow machine some land
// in the next line.)
func TestHealthLogSummarisesARound(t *testing.T) {
	const n = 1000
	raiseNoFile(t, n+256)
	st := routing.New(routing.Options{Polled: true, FailThreshold: routing.DefaultFailThreshold})
	register(t, st, refusedURLs(t, n)...)
	// All lines in logs; the Warn lines, which the wait reads, in warnLogs
	// too.
	var logs, warnLogs syncbuf.Buffer
	logger := slog.New(slog.NewMultiHandler(
		slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}),
		slog.NewJSONHandler(&warnLogs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	// A refused connection answers at once, but a starved -race run on a
	// busy machine may take a while to see it: a timeout well above that.
	p := start(t, st, Config{Interval: 300 * time.Millisecond, Timeout: 3 * time.Second, Logger: logger})

	var warns []logLine
	summed := func() (unhealthy, refused int) {
		warns = warns[:0]
		for _, l := range logLines(t, &warnLogs) {
			warns = append(warns, l)
			unhealthy += l.Unhealthy
			refused += l.Causes[routing.ErrKindConnectRefused]
		}
		return unhealthy, refused
	}
	poll.Until(t, "summaries of all policies unhealthy", func() bool {
		u, _ := summed()
		return u >= n
	})
	rounds := p.Stats().Sweeps // read after the lines: they came no later
	unhealthy, refused := summed()
	if unhealthy != n || refused != n {
		t.Errorf("summaries count %d unhealthy, %d connect_refused; want %d of each", unhealthy, refused, n)
	}
	// One line per round at most (the bound is 5).
	if uint64(len(warns)) > rounds+1 {
		t.Errorf("%d Warn lines in %d probe rounds; want at most one a round", len(warns), rounds)
	}
	for _, w := range warns {
		if w.Msg != "policies unhealthy" || len(w.Causes) != 1 || len(w.Policies) > maxNamed ||
			len(w.Policies)+w.NotNamed != w.Unhealthy || !strings.Contains(w.Error, "connection refused") {
			t.Errorf("summary line %+v: want one cause, at most %d policies named and the rest counted, and an error", w, maxNamed)
		}
	}
	debug := 0
	for _, l := range logLines(t, &logs) {
		if l.Level == "DEBUG" && l.Msg == "policy unhealthy" && l.ErrorKind == routing.ErrKindConnectRefused {
			debug++
		}
	}
	if debug != n {
		t.Errorf("%d Debug lines of a policy becoming unhealthy; want %d, one each", debug, n)
	}
	t.Logf("%d policies: %d Warn lines in %d probe rounds, %d policies in the first", n, len(warns), rounds, warns[0].Unhealthy)
}

// flush writes nothing for a quiet round, Info for recoveries alone, and
// Warn with both counts when policies went both ways.
func TestHealthLogFlush(t *testing.T) {
	pol := func(i int) *member {
		return newMember(routing.Policy{ID: "p" + strconv.Itoa(i), Index: i, URL: "http://h:" + strconv.Itoa(9000+i)})
	}
	refused := errors.New("connection refused")
	tests := []struct {
		name string
		add  func(h *healthLog)
		want []logLine
	}{
		{"quiet", func(*healthLog) {}, nil},
		{"recoveries", func(h *healthLog) {
			h.add(pol(1), routing.BecameHealthy, "", nil)
			h.add(pol(2), routing.BecameHealthy, "", nil)
		}, []logLine{{Level: "INFO", Msg: "policies healthy again", Healthy: 2, Policies: []string{"p1 http://h:9001", "p2 http://h:9002"}}}},
		{"both ways", func(h *healthLog) {
			h.add(pol(0), routing.BecameHealthy, "", nil)
			h.add(pol(1), routing.BecameUnhealthy, "status_503", errors.New("status 503"))
			for i := 2; i < 8; i++ {
				h.add(pol(i), routing.BecameUnhealthy, routing.ErrKindConnectRefused, refused)
			}
			h.add(pol(8), routing.NoTransition, "", nil)
		}, []logLine{{Level: "WARN", Msg: "policies unhealthy, others healthy again", Unhealthy: 7, Healthy: 1,
			Causes:   map[string]int{"connect_refused": 6, "status_503": 1},
			Policies: []string{"p1 http://h:9001", "p2 http://h:9002", "p3 http://h:9003", "p4 http://h:9004", "p5 http://h:9005"},
			NotNamed: 2, Error: "status 503"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs syncbuf.Buffer
			logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			var h healthLog
			tt.add(&h)
			h.flush(logger)
			h.flush(logger) // the round is over: nothing more
			if got := logLines(t, &logs); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("lines %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
