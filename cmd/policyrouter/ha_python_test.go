package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/client"
)

// pyFailoverCounts is the JSON line testdata/ha_python_client.py prints.
type pyFailoverCounts struct {
	Selects              int      `json:"selects"`
	SuccessesByEpoch     []int    `json:"successes_by_epoch"`
	NotLeader            int      `json:"not_leader"`
	Unavailable          int      `json:"unavailable"`
	RequestErrors        int      `json:"request_errors"`
	SelectRequestErrors  int      `json:"select_request_errors"`
	ReleaseRequestErrors int      `json:"release_request_errors"`
	OtherErrors          int      `json:"other_errors"`
	ReleasedTrue         int      `json:"released_true"`
	ReleasedFalse        int      `json:"released_false"`
	BaseURLChanges       int      `json:"base_url_changes"`
	BaseURLs             []string `json:"base_urls"`
	MaxGapS              float64  `json:"max_gap_s"`
	Errors               []string `json:"errors"`
	TimedOut             bool     `json:"timed_out"`
}

// selectTotal returns the /select calls the replica at u has answered,
// and whether it says it leads; ok is false when it does not answer.
func selectTotal(u string) (n uint64, leading, ok bool) {
	st, err := client.New(u, haClient).Stats(context.Background())
	if err != nil {
		return 0, false, false
	}
	return st.Decisions.SelectTotal, st.Replica != nil && st.Replica.Leading, true
}

// TestHAPythonClientFailover runs the Python client, given the URLs of
// three router replicas on one etcd, in a select and release loop while
// the test SIGKILLs the leader twice. The client must find each new leader
// by itself within its failover_timeout: it never raises NotLeader, it
// raises a transport error only for calls that were in flight when a
// leader died, it moves its base_url off every dead leader, and selects
// succeed after the last kill. It logs the longest pause between two
// successful selects, the fail-over time as a trainer's workers see it.
func TestHAPythonClientFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("three router processes, a Python client and two leader kills")
	}
	python := pythonWithHTTPX(t)
	const (
		kills     = 2
		nPolicies = 4
		threads   = 3
		timeoutMS = 1000
		// Selects a leader must have answered before it is killed, and
		// that the new one must answer before the next step.
		progress = 20
		// Generous bounds for a 2-core shared machine.
		stepMax   = 30 * time.Second
		scriptMax = 90 * time.Second
	)
	_, procs, cl := startReplicas(t, 3, "/ha-python/", "2s", "100ms")
	allURLs, _ := cl.snapshot()

	// Capacity-1 policies that always answer idle (nobody holds them),
	// registered through the first replica, leader or not.
	leader := waitLeader(t, cl)
	for i := range nPolicies {
		p := newHeldPolicy(t)
		id := fmt.Sprintf("py-%d", i)
		code, body, err := haPost(allURLs[0]+"/policies", map[string]any{"url": p.srv.URL, "index": i, "id": id, "capacity": 1})
		if err != nil || code != http.StatusCreated {
			t.Fatalf("register %s: %d %s %v", id, code, body, err)
		}
	}

	// The client, given every replica's URL and nothing else. Each line
	// on its stdin tells it of a kill; closing stdin stops it.
	root, _ := filepath.Abs("../..")
	ctx, cancel := context.WithTimeout(context.Background(), scriptMax)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, append([]string{filepath.Join("testdata", "ha_python_client.py"),
		strconv.Itoa(threads), strconv.Itoa(timeoutMS), strconv.Itoa(int(scriptMax/time.Second) - 10)}, allURLs...)...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "clients/python"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	scriptDone := false
	var scriptErr error
	t.Cleanup(func() {
		if !scriptDone {
			cancel()
			<-exited
		}
	})

	// waitSelects waits until the leader at u has answered at least want
	// selects, failing the test if the script ends or the bound passes.
	waitSelects := func(what, u string, want uint64) {
		t.Helper()
		deadline := time.Now().Add(stepMax)
		for {
			if n, _, _ := selectTotal(u); n >= want {
				return
			}
			select {
			case err := <-exited:
				scriptDone, scriptErr = true, err
				t.Fatalf("%s: the Python client exited early (%v):\n%s\n%s", what, err, stdout.String(), stderr.String())
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s answered fewer than %d selects within %v", what, u, want, stepMax)
			}
		}
	}

	waitSelects("before the first kill", leader, progress)
	for k := range kills {
		before, _, _ := selectTotal(leader)
		_ = procs[leader].cmd.Process.Kill()
		if _, err := fmt.Fprintln(stdin, "killed", leader); err != nil {
			t.Fatalf("tell the client of kill %d: %v", k+1, err)
		}
		cl.replace(leader, "")
		next := waitLeader(t, cl)
		t.Logf("kill %d: leader %s killed after %d selects; %s leads", k+1, leader, before, next)
		leader = next
		// The client, knowing nothing but the three URLs, finds it.
		waitSelects(fmt.Sprintf("after kill %d", k+1), leader, progress)
	}
	stdin.Close()
	if !scriptDone {
		select {
		case scriptErr = <-exited:
		case <-time.After(stepMax):
			cancel()
			scriptErr = <-exited
			t.Errorf("the Python client did not stop within %v of its stdin closing", stepMax)
		}
		scriptDone = true
	}
	if scriptErr != nil {
		t.Fatalf("the Python client failed: %v\nstdout:\n%s\nstderr:\n%s", scriptErr, stdout.String(), stderr.String())
	}
	line := strings.TrimSpace(stdout.String())
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	var c pyFailoverCounts
	if err := json.Unmarshal([]byte(line), &c); err != nil {
		t.Fatalf("the Python client's counts: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	t.Logf("python client (%d threads sharing one Client, failover_timeout 15s): %d selects (by epoch between kills %v), "+
		"%d NotLeader, %d other Unavailable, %d transport errors (%d select, %d release), %d other errors, "+
		"releases %d true / %d false, base_url changed %d times %v",
		threads, c.Selects, c.SuccessesByEpoch, c.NotLeader, c.Unavailable, c.RequestErrors,
		c.SelectRequestErrors, c.ReleaseRequestErrors, c.OtherErrors, c.ReleasedTrue, c.ReleasedFalse,
		c.BaseURLChanges, c.BaseURLs)
	t.Logf("longest gap between two successful selects: %.2fs (leader-ttl 2s, poll-interval 100ms, %d kills)", c.MaxGapS, kills)
	if len(c.Errors) > 0 {
		t.Logf("errors the client raised (first %d):\n  %s", len(c.Errors), strings.Join(c.Errors, "\n  "))
	}

	if c.TimedOut {
		t.Errorf("the Python client stopped on its own time bound, not when told")
	}
	if len(c.SuccessesByEpoch) != kills+1 {
		t.Fatalf("the client saw %d kill notices, want %d", len(c.SuccessesByEpoch)-1, kills)
	}
	for k, n := range c.SuccessesByEpoch {
		if n == 0 {
			t.Errorf("no successful select begun after kill %d (epochs %v)", k, c.SuccessesByEpoch)
		}
	}
	if c.NotLeader != 0 {
		t.Errorf("the client raised NotLeader %d times; want 0: every fail-over should end within failover_timeout", c.NotLeader)
	}
	// Each thread has at most one call in flight at a kill; a pooled
	// connection to the dead leader that the kernel resets just after
	// urllib3 checked it can cost one more.
	if limit := 2 * threads * kills; c.RequestErrors > limit {
		t.Errorf("the client raised %d requests exceptions; want at most %d (calls in flight at each of %d kills, by %d threads)",
			c.RequestErrors, limit, kills, threads)
	}
	if c.OtherErrors != 0 {
		t.Errorf("the client raised %d errors other than Unavailable and transport errors", c.OtherErrors)
	}
	if c.BaseURLChanges < kills {
		t.Errorf("the client's base_url changed %d times (%v); want at least once per kill (%d)", c.BaseURLChanges, c.BaseURLs, kills)
	}
	if n := len(c.BaseURLs); n == 0 || c.BaseURLs[n-1] != leader {
		t.Errorf("the client's last base_url is %v; want the last leader %s", c.BaseURLs, leader)
	}
}
