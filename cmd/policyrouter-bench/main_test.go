package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/policyrouter/policyrouter/internal/prereq"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quick are the flags of a short run: no timing is asserted, only that
// both sides serve every workload without errors. The big /assign is made
// small enough that a loaded machine under -race still answers it within
// a phase: the tests check the harness, not the figures.
var quick = []string{"-duration", "200ms", "-rounds", "1", "-concurrency", "4", "-seed-budget", "20ms", "-core-budget", "20ms",
	"-assign-policies", "128", "-assign-tasks", "512", "-assign-nodes", "4"}

func runQuick(tb testing.TB, extra ...string) *report {
	tb.Helper()
	cfg, err := parseConfig(append(append([]string{}, quick...), extra...), io.Discard)
	if err != nil {
		tb.Fatal(err)
	}
	rep, err := runHarness(context.Background(), cfg, io.Discard)
	if err != nil {
		tb.Fatal(err)
	}
	return rep
}

func TestWorkloads(t *testing.T) {
	for _, name := range allWorkloadNames() {
		if name == wSeed {
			continue
		}
		t.Run(name, func(t *testing.T) {
			extra := []string{"-workloads", name}
			profile := filepath.Join(t.TempDir(), "select.pprof")
			if name == wSelectNodeAffinity {
				extra = append(extra, "-profile-select", profile)
			}
			rep := runQuick(t, extra...)
			if len(rep.Workloads) != 1 {
				t.Fatalf("got %d workload results, want 1", len(rep.Workloads))
			}
			r := rep.Workloads[0]
			if r.Name != name {
				t.Errorf("got workload %q, want %q", r.Name, name)
			}
			if r.Floor.Throughput <= 0 || r.Router.Throughput <= 0 {
				t.Errorf("throughput: floor %v, router %v; want both positive", r.Floor.Throughput, r.Router.Throughput)
			}
			if r.FloorErrors != 0 || r.RouterErrors != 0 {
				t.Errorf("errors: floor %d, router %d, first: %s", r.FloorErrors, r.RouterErrors, r.FirstError)
			}
			if r.ThroughputRatio <= 0 || r.P99Ratio <= 0 {
				t.Errorf("ratios: throughput %v, p99 %v; want both positive", r.ThroughputRatio, r.P99Ratio)
			}
			if r.Server.HandlerMeanMS <= 0 {
				t.Errorf("handler mean %v ms; want the router's request histogram to have moved", r.Server.HandlerMeanMS)
			}
			if r.Unloaded != nil && (r.Unloaded.Router.Throughput <= 0 || r.Unloaded.Router.Errors != 0) {
				t.Errorf("unloaded run: %+v", r.Unloaded.Router)
			}
			if name == wSelectNodeAffinity {
				if fi, err := os.Stat(profile); err != nil || fi.Size() == 0 {
					t.Errorf("profile %s: %v, %v", profile, fi, err)
				}
			}
		})
	}
}

func TestSeed(t *testing.T) {
	rep := runQuick(t, "-workloads", wSeed, "-assign-policies", "64", "-assign-tasks", "256", "-assign-nodes", "4")
	if rep.Seed == nil || len(rep.Seed.Cases) == 0 {
		t.Fatal("no seed cases")
	}
	for _, c := range rep.Seed.Cases {
		if c.GoReps < 3 || c.GoMedianUS <= 0 {
			t.Errorf("%s: %d Go reps, median %v us", c.Name, c.GoReps, c.GoMedianUS)
		}
		if c.SameAnswer != nil && !*c.SameAnswer {
			t.Errorf("%s: the Go core and the seed assigned differently", c.Name)
		}
	}
	if rep.Seed.Skipped != "" {
		// The Go side was checked above; the comparison with the seed
		// needs Python.
		prereq.Missing(t, "the seed's Python side did not run: %s", rep.Seed.Skipped)
	} else if rep.Seed.Cases[0].SameAnswer == nil {
		t.Errorf("Python ran but %s was not compared", rep.Seed.Cases[0].Name)
	}
}

// TestOutput checks the table, the JSON report and -merge of two reports.
func TestOutput(t *testing.T) {
	dir := t.TempDir()
	args := append(append([]string{}, quick...), "-workloads", wAssign1)
	var table bytes.Buffer
	if err := run(context.Background(), args, &table, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{wAssign1, "throughput ratio", "machine:"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	var files []string
	for _, name := range []string{"a.json", "b.json"} {
		var out bytes.Buffer
		if err := run(context.Background(), append(args, "-json"), &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		var rep report
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("-json output: %v", err)
		}
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, out.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	var merged bytes.Buffer
	if err := run(context.Background(), []string{"-merge", strings.Join(files, ",")}, &merged, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(merged.String(), "median of medians over 2 runs") || !strings.Contains(merged.String(), wAssign1) {
		t.Errorf("merge output:\n%s", merged.String())
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-workloads", "nope"},
		{"-duration", "0s"},
		{"-rounds", "0"},
		{"-concurrency", "0"},
		{"-log-level", "loud"},
		{"-cpuprofile", "a", "-profile-select", "b"},
		{"-profile-select", "b", "-workloads", wAssign1},
		{"extra"},
	} {
		if _, err := parseConfig(args, io.Discard); err == nil {
			t.Errorf("parseConfig(%q) = nil error, want one", args)
		}
	}
}
