package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary run as the benchmark's children, as the
// command's own binary does.
func TestMain(m *testing.M) {
	if ok, err := runChild(); ok {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestParseStat(t *testing.T) {
	// proc(5): pid (comm) state ppid pgrp session tty tpgid flags minflt
	// cminflt majflt cmajflt utime stime ...
	line := "4242 (nginx: worker (x)) S 4240 4240 4240 0 -1 4194624 10 0 0 0 123 45 0 0 20 0 1 0 5 0"
	pgrp, ticks, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if pgrp != 4240 || ticks != 168 {
		t.Errorf("got pgrp %d, ticks %d; want 4240, 168", pgrp, ticks)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 a 3 0 -1 0 0 0 0 0 1 2"} {
		if _, _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q): no error", bad)
		}
	}
}

func TestGroupCPU(t *testing.T) {
	if _, err := groupCPU(syscall.Getpgrp()); err != nil {
		t.Fatalf("this process's group: %v", err)
	}
	if _, err := groupCPU(-5); err == nil {
		t.Error("a group with no process: no error")
	}
}

func TestReadResponse(t *testing.T) {
	for _, c := range []struct {
		name       string
		in         string
		status     int
		keep       bool
		nextIsRest bool
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: application/json\r\n\r\nhello", 200, true, true},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;x=1\r\nabc\r\n0\r\nTrailer: y\r\n\r\n", 200, true, true},
		{"close", "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\ncontent-length: 2\r\n\r\nno", 503, false, true},
		{"until-eof", "HTTP/1.0 200 OK\r\n\r\nbody to the end", 200, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			rd := bufio.NewReader(strings.NewReader(c.in + "REST"))
			status, keep, err := readResponse(rd)
			if err != nil {
				t.Fatal(err)
			}
			if status != c.status || keep != c.keep {
				t.Errorf("got %d, keep %v; want %d, %v", status, keep, c.status, c.keep)
			}
			rest, _ := io.ReadAll(rd)
			if got := string(rest) == "REST"; got != c.nextIsRest {
				t.Errorf("left %q after the answer", rest)
			}
		})
	}
	for _, bad := range []string{"", "SPDY/3 200 OK\r\n\r\n", "HTTP/1.1 2x0 OK\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"} {
		if _, _, err := readResponse(bufio.NewReader(strings.NewReader(bad))); err == nil {
			t.Errorf("readResponse(%q): no error", bad)
		}
	}
}

func TestParseConfig(t *testing.T) {
	c, err := parseConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Sides, ","); got != "direct,nginx,bare,router" {
		t.Errorf("sides without -base-binary: %s", got)
	}
	c, err = parseConfig([]string{"-base-binary", "/x", "-sides", "router,base"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Sides, ","); got != "router,base" {
		t.Errorf("sides: %s", got)
	}
	for _, args := range [][]string{{"-sides", "floor"}, {"-rounds", "0"}, {"-upstream", "caddy"}, {"-workload", "chat"}, {"-sides", "base"}, {"x"}} {
		if _, err := parseConfig(args, io.Discard); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// TestDirectAndBareSides runs the benchmark's direct and bare sides
// against the Go upstream, with each workload: both answer, the load
// generator counts their answers, and none failed.
func TestDirectAndBareSides(t *testing.T) {
	for name := range workloads {
		t.Run(name, func(t *testing.T) {
			cfg, err := parseConfig([]string{"-sides", "direct,bare", "-nginx", "none", "-upstream", "go", "-workload", name,
				"-rounds", "1", "-warmup", "0", "-duration", "300ms", "-connections", "4", "-policies", "2"}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rep, err := runHarness(ctx, cfg, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Sides) != 2 {
				t.Fatalf("sides: %+v", rep.Sides)
			}
			for _, s := range rep.Sides {
				if len(s.Phases) != 1 || s.Phases[0].Requests == 0 || s.Phases[0].Failed != 0 {
					t.Errorf("%s: phases %+v, first failure %q", s.Name, s.Phases, s.FirstError)
				}
			}
			var out strings.Builder
			writeTable(&out, rep)
			for _, want := range []string{"no nginx binary", "POST " + workloads[name].path + ","} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("the report does not say %q:\n%s", want, out.String())
				}
			}
		})
	}
}

// Over two rounds every side runs once before and once after each other.
func TestRoundOrder(t *testing.T) {
	const n = 4
	before := make(map[[2]int]int)
	for r := range 2 {
		order := roundOrder(n, r)
		for i := range order {
			for j := i + 1; j < len(order); j++ {
				before[[2]int{order[i], order[j]}]++
			}
		}
	}
	for a := range n {
		for b := range n {
			if a != b && before[[2]int{a, b}] != 1 {
				t.Errorf("side %d ran before side %d in %d of 2 rounds, want 1", a, b, before[[2]int{a, b}])
			}
		}
	}
}

// The report gives the router's CPU against the base's for every round.
func TestReportRatiosPerRound(t *testing.T) {
	ph := func(cpuMicros int64) phase {
		return phase{Requests: 1000, Seconds: 1, ProxyCPU: time.Duration(cpuMicros*1000) * time.Microsecond}
	}
	rep := &report{Config: config{Rounds: 2, Workload: "completions"}, Sides: []sideResult{
		{Name: sideBase, Phases: []phase{ph(100), ph(200)}},
		{Name: sideRouter, Phases: []phase{ph(50), ph(120)}},
	}}
	var out strings.Builder
	writeTable(&out, rep)
	if want := "router CPU vs base, per round: 0.50 0.60\n"; !strings.Contains(out.String(), want) {
		t.Errorf("the report does not say %q:\n%s", want, out.String())
	}
}

// The histogram's quantiles are within its 2% buckets of the true ones.
func TestHistogramQuantile(t *testing.T) {
	var h histogram
	if got := h.quantile(0.99); got != 0 {
		t.Errorf("empty: %v, want 0", got)
	}
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * 10 * time.Microsecond) // 10 µs .. 10 ms
	}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5 * time.Millisecond}, {0.99, 9900 * time.Microsecond}} {
		if got := h.quantile(tt.q); got < tt.want || float64(got) > float64(tt.want)*1.021 {
			t.Errorf("quantile(%v) = %v, want within 2%% above %v", tt.q, got, tt.want)
		}
	}
}

// The unique workload's requests differ in their first token id and stay
// valid JSON of the same length.
func TestUniqueWorkloadNumbersRequests(t *testing.T) {
	wl := workloads["generate8k-unique"]
	var l load
	req := []byte(wl.body)
	at := len(uniqueIDsFirst) - uniqueDigits - 1
	seen := map[string]bool{}
	for range 3 {
		l.number(req, at)
		var body struct {
			InputIDs []int `json:"input_ids"`
		}
		if err := json.Unmarshal(req, &body); err != nil || len(req) != len(wl.body) || len(body.InputIDs) != 8192 {
			t.Fatalf("numbered body: %v, %d bytes (want %d), %d ids", err, len(req), len(wl.body), len(body.InputIDs))
		}
		first := strconv.Itoa(body.InputIDs[0])
		if seen[first] {
			t.Fatalf("first id %s twice", first)
		}
		seen[first] = true
	}
}
