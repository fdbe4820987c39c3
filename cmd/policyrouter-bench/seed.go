package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/policyrouter/policyrouter/internal/benchkit"
	"github.com/policyrouter/policyrouter/routing"
)

// seedResult compares the seed's algorithms, in Python, with the Go
// routing core on the same inputs.
type seedResult struct {
	// Skipped says why the Python side did not run, if it did not.
	Skipped string     `json:"skipped,omitempty"`
	Python  string     `json:"python,omitempty"`
	Cases   []seedCase `json:"cases"`
}

// seedCase is one input timed on both sides (or on the Go side only, for
// the cases with a "state_assign" name: routing.State.Assign, the call the
// /assign handler makes).
type seedCase struct {
	Name string `json:"name"`

	PythonReps     int     `json:"python_reps,omitempty"`
	PythonMedianUS float64 `json:"python_median_us,omitempty"`
	PythonMinUS    float64 `json:"python_min_us,omitempty"`

	GoReps     int     `json:"go_reps"`
	GoMedianUS float64 `json:"go_median_us"`
	GoP99US    float64 `json:"go_p99_us"`
	GoMinUS    float64 `json:"go_min_us"`

	// Speedup is the Python median over the Go median.
	Speedup float64 `json:"speedup,omitempty"`
	// SameAnswer reports whether both sides assigned the same indices.
	SameAnswer *bool `json:"same_answer,omitempty"`
}

// maxCoreReps bounds the repetitions of one Go case.
const maxCoreReps = 1_000_000

// The inputs shared with bench/seed_assign.py: loads, nodes and env ids.

func seedLoads(p int) []int64 {
	loads := make([]int64, p)
	for i := range loads {
		loads[i] = int64((i*37 + 11) % 64)
	}
	return loads
}

func seedEnvIDs(n, p int) []string {
	ids := make([]string, n)
	for k := range ids {
		ids[k] = "env-" + strconv.Itoa((k*7)%p)
	}
	return ids
}

func checksum(indices []int) string {
	var b strings.Builder
	for i, x := range indices {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(x))
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])[:16]
}

// goCase is one Go case: run returns the assignment.
type goCase struct {
	name string
	run  func() ([]int, error)
}

// runSeed times the Go routing core, then the seed in Python when python3
// and the script are there.
func runSeed(ctx context.Context, cfg config) (*seedResult, error) {
	p, nodes := cfg.AssignPolicies, cfg.AssignNodes
	loads := seedLoads(p)
	in := routing.AffinityInput{EnvNode: make(map[int]string, p)}
	for i := range p {
		in.Indices = append(in.Indices, i)
		in.Nodes = append(in.Nodes, benchkit.NodeName(i, nodes))
		in.EnvNode[i] = benchkit.NodeName(i, nodes)
	}
	in.Loads = loads

	state, err := seedState(p, nodes)
	if err != nil {
		return nil, err
	}
	var cases []goCase
	for _, n := range []int{cfg.AssignTasks, 1} {
		aff := in
		aff.EnvIDs = seedEnvIDs(n, p)
		cases = append(cases,
			goCase{fmt.Sprintf("simple/n=%d/p=%d", n, p), func() ([]int, error) { return routing.LeastLoaded(loads, n) }},
			goCase{fmt.Sprintf("node_affinity/n=%d/p=%d/nodes=%d", n, p, nodes), func() ([]int, error) { return routing.NodeAffinity(aff) }},
		)
	}
	n := cfg.AssignTasks
	envs := seedEnvIDs(n, p)
	cases = append(cases,
		goCase{fmt.Sprintf("state_assign_stateless/n=%d/p=%d", n, p), func() ([]int, error) {
			a, err := state.Assign(routing.AssignRequest{Kind: routing.AssignLeastLoaded, NumTasks: n, Loads: loads})
			return a.Indices, err
		}},
		goCase{fmt.Sprintf("state_assign_tracked/n=%d/p=%d", n, p), func() ([]int, error) {
			a, err := state.Assign(routing.AssignRequest{Kind: routing.AssignLeastLoaded, NumTasks: n})
			return a.Indices, err
		}},
		goCase{fmt.Sprintf("state_assign_affinity_tracked/n=%d/p=%d/nodes=%d", n, p, nodes), func() ([]int, error) {
			a, err := state.Assign(routing.AssignRequest{Kind: routing.AssignNodeAffinity, NumTasks: n, EnvIDs: envs})
			return a.Indices, err
		}},
	)

	res := &seedResult{}
	sums := make(map[string]string)
	for _, c := range cases {
		sc, sum, err := timeGo(ctx, c, cfg.CoreBudget)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		res.Cases = append(res.Cases, sc)
		sums[c.name] = sum
	}

	py, err := runPython(ctx, cfg)
	if err != nil {
		res.Skipped = err.Error()
		return res, nil
	}
	res.Python = py.Python
	for _, pc := range py.Cases {
		i := slices.IndexFunc(res.Cases, func(c seedCase) bool { return c.Name == pc.Name })
		if i < 0 {
			continue
		}
		c := &res.Cases[i]
		c.PythonReps = pc.Reps
		c.PythonMedianUS = float64(pc.MedianNS) / 1e3
		c.PythonMinUS = float64(pc.MinNS) / 1e3
		c.Speedup = benchkit.Ratio(c.PythonMedianUS, c.GoMedianUS)
		same := pc.Checksum == sums[c.Name]
		c.SameAnswer = &same
	}
	return res, nil
}

// seedState is a routing state with p policies over nodes, as the
// benchmark's topology places them.
func seedState(p, nodes int) (*routing.State, error) {
	st := routing.New(routing.Options{})
	ps := make([]routing.Policy, p)
	for i := range ps {
		ps[i] = routing.Policy{Index: i, ID: "policy-" + strconv.Itoa(i), URL: "http://127.0.0.1:1/p/" + strconv.Itoa(i)}
	}
	return st, st.Update(ps, benchkit.Topology(p, p, nodes))
}

// timeGo runs c until budget is spent (at least 3 times, at most
// maxCoreReps) and returns its timings and the first answer's checksum.
func timeGo(ctx context.Context, c goCase, budget time.Duration) (seedCase, string, error) {
	first, err := c.run()
	if err != nil {
		return seedCase{}, "", err
	}
	var times []time.Duration
	deadline := time.Now().Add(budget)
	for len(times) < maxCoreReps && (len(times) < 3 || time.Now().Before(deadline)) && ctx.Err() == nil {
		t0 := time.Now()
		_, err := c.run()
		times = append(times, time.Since(t0))
		if err != nil {
			return seedCase{}, "", err
		}
	}
	slices.Sort(times)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return seedCase{
		Name:       c.name,
		GoReps:     len(times),
		GoMedianUS: us(benchkit.Percentile(times, 0.5)),
		GoP99US:    us(benchkit.Percentile(times, 0.99)),
		GoMinUS:    us(times[0]),
	}, checksum(first), ctx.Err()
}

// pythonReport is what bench/seed_assign.py prints.
type pythonReport struct {
	Python string `json:"python"`
	Cases  []struct {
		Name     string `json:"name"`
		Reps     int    `json:"reps"`
		MedianNS int64  `json:"median_ns"`
		MinNS    int64  `json:"min_ns"`
		Checksum string `json:"checksum"`
	} `json:"cases"`
}

// runPython runs the seed timing script; its error says why it could not.
func runPython(ctx context.Context, cfg config) (*pythonReport, error) {
	py, err := exec.LookPath("python3")
	if err != nil {
		return nil, errors.New("python3 not found: the seed's timings are skipped")
	}
	script, err := findScript(cfg.SeedScript)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, script,
		"--policies", strconv.Itoa(cfg.AssignPolicies),
		"--tasks", strconv.Itoa(cfg.AssignTasks),
		"--nodes", strconv.Itoa(cfg.AssignNodes),
		"--budget", strconv.FormatFloat(cfg.SeedBudget.Seconds(), 'f', -1, 64))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", script, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var rep pythonReport
	if err := json.Unmarshal(out, &rep); err != nil {
		return nil, fmt.Errorf("%s: bad output: %w", script, err)
	}
	return &rep, nil
}

// findScript finds name as given, else relative to the module root (the
// nearest parent directory with a go.mod).
func findScript(name string) (string, error) {
	if _, err := os.Stat(name); err == nil || filepath.IsAbs(name) {
		return name, err
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for range 64 {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, name)
			_, err := os.Stat(p)
			return p, err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", fmt.Errorf("%s not found here or at the module root", name)
}
