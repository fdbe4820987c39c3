// Command policyrouter-proxybench measures the CPU that proxy mode spends
// per proxied request, beside nginx doing the same job, in one run.
//
// It starts an upstream that answers POST /v1/completions (or, with
// -workload generate, SGLang's POST /generate) at once with a fixed JSON
// answer (nginx when installed, else a small Go server, each a
// child process) on one port per policy, then the proxies, each a child
// process: nginx (proxy_pass to the policies with keep-alive upstream
// connections; skipped with a note when no nginx binary is found), a bare
// httputil.ReverseProxy (round robin, nothing else: the floor of a proxy
// built on net/http), the
// policyrouter under test (`serve`, the policies registered with their
// capacity) and optionally a second policyrouter binary, the base, so
// that before and after are measured in the same run. A load generator
// in this process keeps a fixed number of keep-alive connections busy,
// each with one request at a time, against each side in turn: direct (to
// the policies, no proxy), nginx, bare, base, router, for a number of
// rounds.
//
// Over each side's measured window (after a warm-up) it reads the CPU
// time (user + system, /proc/PID/stat) of the proxy's processes only, and
// reports the CPU µs per request and the throughput, as medians over
// rounds, with per-round ratios against nginx and against the base.
//
// Usage:
//
//	go run ./cmd/policyrouter-proxybench                           # builds ./cmd/policyrouter of this tree
//	go run ./cmd/policyrouter-proxybench -base-binary /tmp/old-policyrouter
//	go run ./cmd/policyrouter-proxybench -sides router -rounds 1 -profile proxy.pprof
//
// The machine's cores are shared by the load generator, the upstream and
// the proxy: throughput is bounded by all three, CPU per request much
// less so.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/policyrouter/policyrouter/internal/benchkit"
)

func main() {
	if ok, err := runChild(); ok {
		if err != nil {
			fmt.Fprintln(os.Stderr, "policyrouter-proxybench child:", err)
			os.Exit(1)
		}
		return
	}
	benchkit.Main("policyrouter-proxybench", run)
}

// The sides, in the order each round runs them.
const (
	sideDirect = "direct"
	sideNginx  = "nginx"
	sideBare   = "bare"
	sideBase   = "base"
	sideBase2  = "base2"
	sideRouter = "router"
)

var allSides = []string{sideDirect, sideNginx, sideBare, sideBase, sideBase2, sideRouter}

// config is everything the flags set.
type config struct {
	Duration    time.Duration
	Warmup      time.Duration
	Rounds      int
	Policies    int
	Capacity    int
	Connections int
	Sides       []string
	Binary      string
	BaseBinary  string
	Base2Binary string
	Nginx       string
	Upstream    string
	Workload    string
	Profile     string
	ServeArgs   []string
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("policyrouter-proxybench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sides, serveArgs string
	fs.DurationVar(&c.Duration, "duration", 3*time.Second, "measured window of one side in each round")
	fs.DurationVar(&c.Warmup, "warmup", time.Second, "load before each measured window, not counted")
	fs.IntVar(&c.Rounds, "rounds", 3, "rounds of every side in turn")
	fs.IntVar(&c.Policies, "policies", 8, "policies (upstream ports)")
	fs.IntVar(&c.Capacity, "capacity", 8, "capacity of each policy registered with the router")
	fs.IntVar(&c.Connections, "connections", 64, "keep-alive connections of the load generator, each with one request at a time")
	fs.StringVar(&sides, "sides", strings.Join(allSides, ","), "comma list of sides: "+strings.Join(allSides, ", ")+" (base only with -base-binary)")
	fs.StringVar(&c.Binary, "binary", "", "policyrouter binary of the router side; empty builds ./cmd/policyrouter of this tree")
	fs.StringVar(&c.BaseBinary, "base-binary", "", "a second policyrouter binary, measured as the base side in the same run")
	fs.StringVar(&c.Base2Binary, "base2-binary", "", "a third policyrouter binary (or a script that execs one with more flags), measured as the base2 side: a step between base and router, for an ablation")
	fs.StringVar(&c.Nginx, "nginx", "auto", `nginx binary; "auto" looks for nginx in PATH and /usr/sbin, "none" skips nginx`)
	fs.StringVar(&c.Upstream, "upstream", "auto", "what answers as the policies: nginx, go (a Go server), or auto (nginx when found)")
	fs.StringVar(&c.Workload, "workload", "completions", "what is sent: completions (POST /v1/completions, a text prompt) generate (POST /generate of 16 token ids with logprobs, which the router resumes on abort), generate8k (the same with 8192 token ids), or generate8k-unique (the same with a new first id on every request, so that no two prompts share a block)")
	fs.StringVar(&c.Profile, "profile", "", "run the router side as this tree's router under a CPU profile written to this file, and its allocations to FILE.allocs (instead of -binary)")
	fs.StringVar(&serveArgs, "serve-args", "", "more flags of `serve` for both policyrouter sides, space-separated")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if c.Sides, err = benchkit.ParseList("sides", "side", sides, allSides); err != nil {
		return c, err
	}
	if c.BaseBinary == "" {
		c.Sides = removeSide(c.Sides, sideBase)
	}
	if c.Base2Binary == "" {
		c.Sides = removeSide(c.Sides, sideBase2)
	}
	c.ServeArgs = strings.Fields(serveArgs)
	switch {
	case c.Duration <= 0 || c.Duration > 10*time.Minute || c.Warmup < 0 || c.Warmup > time.Minute:
		return c, errors.New("-duration must be in (0, 10m] and -warmup in [0, 1m]")
	case c.Rounds < 1 || c.Rounds > 100:
		return c, errors.New("-rounds must be in [1, 100]")
	case c.Policies < 1 || c.Policies > 256 || c.Capacity < 1 || c.Capacity > 4096:
		return c, errors.New("-policies must be in [1, 256] and -capacity in [1, 4096]")
	case c.Connections < 1 || c.Connections > 4096:
		return c, errors.New("-connections must be in [1, 4096]")
	case c.Upstream != "auto" && c.Upstream != "nginx" && c.Upstream != "go":
		return c, fmt.Errorf("-upstream must be auto, nginx or go, not %q", c.Upstream)
	case workloads[c.Workload].path == "":
		return c, fmt.Errorf("-workload must be completions, generate, generate8k or generate8k-unique, not %q", c.Workload)
	case len(c.Sides) == 0:
		return c, errors.New("-sides: no side to run")
	}
	return c, nil
}

func removeSide(sides []string, side string) []string {
	var out []string
	for _, s := range sides {
		if s != side {
			out = append(out, s)
		}
	}
	return out
}

// findNginx resolves -nginx: a path, or "" when there is none to run.
func findNginx(flagValue string) string {
	switch flagValue {
	case "none", "":
		return ""
	case "auto":
		if p, err := exec.LookPath("nginx"); err == nil {
			return p
		}
		if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
			return "/usr/sbin/nginx"
		}
		return ""
	default:
		return flagValue
	}
}

// buildRouter builds ./cmd/policyrouter of the module this command runs
// in, into dir.
func buildRouter(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", errors.New("-binary not given and not in the module to build it from")
	}
	bin := filepath.Join(dir, "policyrouter")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/policyrouter")
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/policyrouter: %v\n%s", err, out)
	}
	return bin, nil
}

// run parses args, runs the benchmark and prints the report to stdout;
// progress goes to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	rep, err := runHarness(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	writeTable(stdout, rep)
	return nil
}
