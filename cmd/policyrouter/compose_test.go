package main

// Checks of the container files at the repository root, without a Docker
// engine: docker-compose.yml is loaded with compose-go (the library of
// `docker compose`), every policyrouter command in it and in the
// Dockerfile is parsed with the binary's own flag sets, and the
// registration and Prometheus files under deploy/ must point at the
// compose services. The registration is also sent to a router started
// in-process.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v4"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/app"
	"github.com/policyrouter/policyrouter/routing"
)

// composeRoot is the repository root, where docker-compose.yml,
// the Dockerfile and deploy/ live.
const composeRoot = "../.."

// composeFlagSets registers the flags of each subcommand that a container
// may run, with the registration functions the commands use themselves.
var composeFlagSets = map[string]func(fs *flag.FlagSet){
	"serve":       func(fs *flag.FlagSet) { cfg := app.DefaultConfig(); cfg.RegisterFlags(fs) },
	"demo":        func(fs *flag.FlagSet) { (&demoConfig{}).register(fs) },
	"fake-policy": func(fs *flag.FlagSet) { (&fakePolicyConfig{}).register(fs) },
}

// loadCompose loads docker-compose.yml as `docker compose` does, with
// schema validation and consistency checks, and without the process's
// environment so that the result does not depend on the machine. Services
// of the given profiles are enabled besides the default ones.
func loadCompose(tb testing.TB, profiles ...string) *types.Project {
	tb.Helper()
	root, err := filepath.Abs(composeRoot)
	if err != nil {
		tb.Fatal(err)
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root), cli.WithConsistency(true), cli.WithResolvedPaths(true), cli.WithProfiles(profiles))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := opts.LoadProject(ctx)
	if err != nil {
		tb.Fatalf("docker-compose.yml: %v", err)
	}
	return p
}

// usesBinary reports whether a service runs the policyrouter image.
func usesBinary(s types.ServiceConfig) bool {
	return s.Build != nil || strings.HasPrefix(s.Image, "policyrouter")
}

// parseCommand checks that args is a subcommand of this binary followed by
// flags it accepts, and returns the parsed flag set.
func parseCommand(tb testing.TB, where string, args []string) (string, *flag.FlagSet) {
	tb.Helper()
	if len(args) == 0 {
		tb.Fatalf("%s: no command", where)
	}
	sub, flags := args[0], args[1:]
	register, ok := composeFlagSets[sub]
	if !ok {
		tb.Fatalf("%s: runs %q; want one of the subcommands %v", where, sub, slices.Sorted(maps.Keys(composeFlagSets)))
	}
	if err := dispatches(sub); err != nil {
		tb.Fatalf("%s: %v", where, err)
	}
	fs := flag.NewFlagSet(sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	register(fs)
	if err := fs.Parse(flags); err != nil {
		tb.Fatalf("%s: policyrouter %s %s: %v", where, sub, strings.Join(flags, " "), err)
	}
	if fs.NArg() != 0 {
		tb.Fatalf("%s: policyrouter %s: stray arguments %q", where, sub, fs.Args())
	}
	return sub, fs
}

// dispatches checks that the binary's dispatcher runs the subcommand: with
// -h it stops at the subcommand's flag parsing, before starting anything.
// The usage text goes to /dev/null.
func dispatches(sub string) error {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	stdout, stderr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = null, null
	err = run(context.Background(), []string{sub, "-h"})
	os.Stdout, os.Stderr = stdout, stderr
	if !errors.Is(err, flag.ErrHelp) {
		return fmt.Errorf("policyrouter %s -h: %v, want flag.ErrHelp", sub, err)
	}
	return nil
}

// serveConfigOf parses serve's flags into the router's configuration.
func serveConfigOf(tb testing.TB, args []string) app.Config {
	tb.Helper()
	cfg := app.DefaultConfig()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		tb.Fatal(err)
	}
	return cfg
}

func flagValue(fs *flag.FlagSet, name string) string {
	if f := fs.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

func TestComposeServicesAndPorts(t *testing.T) {
	p := loadCompose(t)
	if got, want := slices.Sorted(maps.Keys(p.Services)), []string{"grafana", "policy-a", "policy-b", "prometheus", "register", "router"}; !slices.Equal(got, want) {
		t.Fatalf("services %v, want %v", got, want)
	}
	// Published ports, all on the host's loopback (see the file's comment).
	wantPorts := map[string]string{"router": "127.0.0.1:8080->8080/tcp", "prometheus": "127.0.0.1:9090->9090/tcp", "grafana": "127.0.0.1:3000->3000/tcp"}
	for name, s := range p.Services {
		var got []string
		for _, port := range s.Ports {
			got = append(got, fmt.Sprintf("%s:%s->%d/%s", port.HostIP, port.Published, port.Target, port.Protocol))
		}
		if want := wantPorts[name]; strings.Join(got, ",") != want {
			t.Errorf("%s publishes %v, want %q", name, got, want)
		}
	}
	for _, name := range []string{"router", "policy-a", "policy-b"} {
		s := p.Services[name]
		if s.Build == nil {
			t.Errorf("%s: not built from the Dockerfile", name)
			continue
		}
		root, _ := filepath.Abs(composeRoot)
		if s.Build.Context != root {
			t.Errorf("%s: build context %s, want the repository root %s", name, s.Build.Context, root)
		}
	}
	if deps := p.Services["register"].DependsOn; deps["router"].Condition == "" {
		t.Errorf("register does not depend on router: %v", deps)
	}
}

// TestComposeCommands parses every policyrouter command of the compose
// file and of the Dockerfile with the binary's flag sets.
func TestComposeCommands(t *testing.T) {
	p := loadCompose(t)
	ran := map[string]bool{}
	for name, s := range p.Services {
		if !usesBinary(s) {
			continue
		}
		if len(s.Entrypoint) != 0 {
			t.Errorf("%s: entrypoint %v overrides the image's /policyrouter", name, s.Entrypoint)
		}
		sub, _ := parseCommand(t, "docker-compose.yml service "+name, s.Command)
		ran[sub] = true
		if sub == "serve" {
			cfg := serveConfigOf(t, s.Command[1:])
			if err := cfg.Validate(); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			if _, err := cfg.Verifier(); err != nil {
				t.Errorf("%s: the router would not start: %v", name, err)
			}
		}
	}
	if !ran["serve"] || !ran["fake-policy"] {
		t.Errorf("compose runs %v; want serve and fake-policy", ran)
	}

	df := readDockerfile(t)
	if want := []string{"/policyrouter"}; !slices.Equal(df.entrypoint, want) {
		t.Errorf("Dockerfile ENTRYPOINT %q, want %q", df.entrypoint, want)
	}
	if !slices.Contains(df.expose, "8080") {
		t.Errorf("Dockerfile EXPOSE %v, want 8080", df.expose)
	}
	if sub, _ := parseCommand(t, "Dockerfile CMD", df.cmd); sub == "serve" {
		cfg := serveConfigOf(t, df.cmd[1:])
		if cfg.Addr != "0.0.0.0:8080" {
			t.Errorf("Dockerfile CMD listens on %s, want 0.0.0.0:8080", cfg.Addr)
		}
		// The image fails closed: without a token key it refuses to serve,
		// and without TLS (or the proxy escape hatch) too; each is checked
		// with the other lifted.
		noProxy, noKey := cfg, cfg
		noProxy.Insecure, noKey.BehindTLSProxy = true, true
		if err := noKey.Validate(); err == nil || !strings.Contains(err.Error(), "without authentication") {
			t.Errorf("Dockerfile CMD with --behind-tls-proxy: %v; it must need a key or an explicit --insecure", err)
		}
		if err := noProxy.Validate(); err == nil || !strings.Contains(err.Error(), "plain HTTP") {
			t.Errorf("Dockerfile CMD with --insecure: %v; it must need TLS or an explicit --behind-tls-proxy", err)
		}
	}
	if df.user == "" || df.user == "root" || df.user == "0" || strings.HasPrefix(df.user, "0:") {
		t.Errorf("Dockerfile USER %q, want a non-root user", df.user)
	}
}

// dockerfile holds the final stage's instructions that the tests check.
type dockerfile struct {
	entrypoint, cmd []string
	expose          []string
	user            string
}

func readDockerfile(tb testing.TB) dockerfile {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(composeRoot, "Dockerfile"))
	if err != nil {
		tb.Fatal(err)
	}
	var d dockerfile
	for line := range strings.Lines(string(data)) {
		instr, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			d = dockerfile{} // only the final stage counts
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &d.entrypoint); err != nil {
				tb.Fatalf("Dockerfile ENTRYPOINT %s: want the exec form: %v", rest, err)
			}
		case "CMD":
			if err := json.Unmarshal([]byte(rest), &d.cmd); err != nil {
				tb.Fatalf("Dockerfile CMD %s: want the exec form: %v", rest, err)
			}
		case "EXPOSE":
			d.expose = append(d.expose, strings.Fields(rest)...)
		case "USER":
			d.user = rest
		}
	}
	return d
}

// fakePolicies maps each compose service that runs fake-policy to its
// port and its number of policies.
func fakePolicies(tb testing.TB, p *types.Project) map[string][2]int {
	tb.Helper()
	out := map[string][2]int{}
	for name, s := range p.Services {
		if !usesBinary(s) || len(s.Command) == 0 || s.Command[0] != "fake-policy" {
			continue
		}
		_, fs := parseCommand(tb, "service "+name, s.Command)
		_, port, err := net.SplitHostPort(flagValue(fs, "addr"))
		if err != nil {
			tb.Fatalf("service %s: fake-policy --addr: %v", name, err)
		}
		nport, err := strconv.Atoi(port)
		if err != nil || nport == 0 {
			tb.Fatalf("service %s: fake-policy needs a fixed port to be registered, not %q", name, port)
		}
		n, err := strconv.Atoi(flagValue(fs, "n"))
		if err != nil {
			tb.Fatal(err)
		}
		out[name] = [2]int{nport, n}
	}
	return out
}

// decodeStrict decodes a JSON file, refusing unknown fields.
func decodeStrict(tb testing.TB, path string, v any) []byte {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	return data
}

// TestComposeRegistration checks what the register job sends: every
// simulated policy of the compose file, once, on a node of the topology;
// and that a router accepts it.
func TestComposeRegistration(t *testing.T) {
	p := loadCompose(t)
	reg := p.Services["register"]
	script := strings.Join(reg.Command, " ")
	mounted := false
	for _, v := range reg.Volumes {
		if v.Target == "/deploy" && v.Source == filepath.Join(mustAbs(t, composeRoot), "deploy") {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("register does not mount ./deploy at /deploy: %+v", reg.Volumes)
	}
	routerPort := p.Services["router"].Ports[0].Target
	for _, want := range []string{
		// /healthz: /readyz waits for policies, which this job registers.
		fmt.Sprintf("http://router:%d/healthz", routerPort),
		fmt.Sprintf("-X PUT http://router:%d/policies", routerPort),
		fmt.Sprintf("-X PUT http://router:%d/topology", routerPort),
		"@/deploy/policies.json", "@/deploy/topology.json",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("register's command lacks %q:\n%s", want, script)
		}
	}

	var policies api.ReplacePoliciesRequest
	policiesJSON := decodeStrict(t, filepath.Join(composeRoot, "deploy", "policies.json"), &policies)
	var topo routing.Topology
	topoJSON := decodeStrict(t, filepath.Join(composeRoot, "deploy", "topology.json"), &topo)

	fakes := fakePolicies(t, p)
	want := map[string]bool{}
	for name, f := range fakes {
		for i := range f[1] {
			want[fmt.Sprintf("http://%s:%d/p/%d", name, f[0], i)] = true
		}
	}
	for _, pr := range policies.Policies {
		if !want[pr.URL] {
			t.Errorf("deploy/policies.json registers %s, which no fake-policy service serves (or twice)", pr.URL)
		}
		delete(want, pr.URL)
		if u, err := url.Parse(pr.URL); err == nil {
			if _, ok := p.Services[u.Hostname()]; !ok {
				t.Errorf("%s: no service %q", pr.URL, u.Hostname())
			}
		}
		if pr.Index == nil || !slices.Contains(topo.Eval(pr.NodeID), *pr.Index) {
			t.Errorf("policy %s (index %v) is not an eval worker of its node %q in deploy/topology.json", pr.URL, pr.Index, pr.NodeID)
		}
	}
	for u := range want {
		t.Errorf("simulated policy %s is not registered in deploy/policies.json", u)
	}

	// A router takes both files as they are.
	base := serveInProcess(t)
	for _, c := range []struct {
		path string
		body []byte
	}{{"/policies", policiesJSON}, {"/topology", topoJSON}} {
		req, err := http.NewRequest(http.MethodPut, base+c.path, bytes.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("PUT %s: %s: %s", c.path, res.Status, body)
		}
	}
}

func mustAbs(tb testing.TB, path string) string {
	tb.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		tb.Fatal(err)
	}
	return abs
}

// serveInProcess runs the router on a free loopback port until the test
// ends and returns its base URL.
func serveInProcess(tb testing.TB) string {
	tb.Helper()
	cfg := serveConfigOf(tb, []string{"--addr", "127.0.0.1:0", "--poll-interval", "1s", "--poll-timeout", "200ms"})
	ctx, cancel := context.WithCancel(context.Background())
	listening := make(chan string, 1)
	done := make(chan error, 1)
	cfg.Logger = slog.New(slog.DiscardHandler)
	go func() { done <- serve(ctx, cfg, listening) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("serve: %v", err)
		}
	})
	select {
	case addr := <-listening:
		return "http://" + addr
	case err := <-done:
		tb.Fatalf("serve: %v", err)
	case <-time.After(10 * time.Second):
		tb.Fatal("serve did not listen within 10s")
	}
	return ""
}

// TestComposePrometheus checks that Prometheus gets deploy/prometheus.yml
// and that it scrapes the router service's /metrics.
func TestComposePrometheus(t *testing.T) {
	p := loadCompose(t)
	prom := p.Services["prometheus"]
	var source string
	for _, v := range prom.Volumes {
		if v.Target == "/etc/prometheus/prometheus.yml" {
			source = v.Source
		}
	}
	if want := filepath.Join(mustAbs(t, composeRoot), "deploy", "prometheus.yml"); source != want {
		t.Fatalf("prometheus mounts %q at /etc/prometheus/prometheus.yml, want %s", source, want)
	}
	data, err := os.ReadFile(source)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			Scheme        string `yaml:"scheme"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("deploy/prometheus.yml: %v", err)
	}

	router := serveConfigOf(t, p.Services["router"].Command[1:])
	_, port, err := net.SplitHostPort(router.Addr)
	if err != nil {
		t.Fatal(err)
	}
	target := "router:" + port
	found := false
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			if slices.Contains(st.Targets, target) {
				found = true
				if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
					t.Errorf("job %s scrapes %s%s, want /metrics", sc.JobName, target, sc.MetricsPath)
				}
				if sc.Scheme != "" && sc.Scheme != "http" {
					t.Errorf("job %s uses scheme %s; the router serves http", sc.JobName, sc.Scheme)
				}
			}
		}
	}
	if !found {
		t.Errorf("deploy/prometheus.yml scrapes no target %s (the router service's --addr port)", target)
	}
	if !slices.ContainsFunc(p.Services["router"].Ports, func(pc types.ServicePortConfig) bool { return strconv.Itoa(int(pc.Target)) == port }) {
		t.Errorf("the router listens on %s but its compose port targets another port", port)
	}
}

// TestComposeTLS checks the "tls" profile: router-tls serves HTTPS with a
// certificate and key that are compose secrets it mounts, on the port it
// publishes.
func TestComposeTLS(t *testing.T) {
	p := loadCompose(t, "tls")
	s, ok := p.Services["router-tls"]
	if !ok {
		t.Fatalf("no service router-tls in the tls profile: %v", slices.Sorted(maps.Keys(p.Services)))
	}
	if _, ok := loadCompose(t).Services["router-tls"]; ok {
		t.Error("router-tls runs without the tls profile: a fresh checkout has no certificate for it")
	}
	sub, _ := parseCommand(t, "docker-compose.yml service router-tls", s.Command)
	if sub != "serve" {
		t.Fatalf("router-tls runs %s, want serve", sub)
	}
	cfg := serveConfigOf(t, s.Command[1:])
	if err := cfg.Validate(); err != nil {
		t.Errorf("router-tls: %v", err)
	}
	if _, err := cfg.Verifier(); err != nil {
		t.Errorf("router-tls would not start: %v", err)
	}
	if cfg.BehindTLSProxy || cfg.TLSCert == "" {
		t.Errorf("router-tls: --tls-cert %q, --behind-tls-proxy %v; want TLS served by the router", cfg.TLSCert, cfg.BehindTLSProxy)
	}
	mounted := map[string]bool{}
	for _, sec := range s.Secrets {
		target := sec.Target
		if target == "" {
			target = sec.Source
		}
		if !strings.HasPrefix(target, "/") {
			target = "/run/secrets/" + target
		}
		mounted[target] = true
		if _, ok := p.Secrets[sec.Source]; !ok {
			t.Errorf("router-tls mounts secret %q, which the file does not define", sec.Source)
		}
	}
	for flagName, path := range map[string]string{"--tls-cert": cfg.TLSCert, "--tls-key": cfg.TLSKey} {
		if !mounted[path] {
			t.Errorf("router-tls %s %s: not a secret it mounts (%v)", flagName, path, mounted)
		}
	}
	_, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Ports) != 1 || strconv.Itoa(int(s.Ports[0].Target)) != port || s.Ports[0].HostIP != "127.0.0.1" {
		t.Errorf("router-tls listens on %s and publishes %+v; want that port on 127.0.0.1", port, s.Ports)
	}
}

// The "ha" profile: router replicas sharing one etcd.

// composeEtcdImages are the official etcd images; the tag must be the
// version of the etcd client in go.mod.
var composeEtcdImages = []string{"gcr.io/etcd-development/etcd:", "quay.io/coreos/etcd:"}

// argValue returns the value of --name in a command's arguments, given as
// "--name value" or "--name=value".
func argValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// goModVersion returns the version that go.mod requires of a module.
func goModVersion(tb testing.TB, module string) string {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(composeRoot, "go.mod"))
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == module {
			return f[1]
		}
	}
	tb.Fatalf("go.mod does not require %s", module)
	return ""
}

// haProblems checks the services of the "ha" profile of p and returns
// what is wrong with them: etcd, the router replicas on it and the
// registration job that registers through one of them.
func haProblems(tb testing.TB, p *types.Project) []string {
	tb.Helper()
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	// etcd: one official image, at the client's version, serving clients on
	// every interface of its container and advertising its service name.
	var etcdName string
	var etcd types.ServiceConfig
	for name, s := range p.Services {
		if slices.ContainsFunc(composeEtcdImages, func(prefix string) bool { return strings.HasPrefix(s.Image, prefix) }) {
			if etcdName != "" {
				bad("two etcd services, %s and %s; the replicas need one", etcdName, name)
			}
			etcdName, etcd = name, s
		}
	}
	if etcdName == "" {
		return append(problems, fmt.Sprintf("no etcd service (image %v...) in the ha profile", composeEtcdImages))
	}
	if _, tag, _ := strings.Cut(etcd.Image[strings.LastIndex(etcd.Image, "/"):], ":"); tag != goModVersion(tb, "go.etcd.io/etcd/client/v3") {
		bad("etcd runs %s; want the version of go.etcd.io/etcd/client/v3 in go.mod", etcd.Image)
	}
	if !slices.Contains(etcd.Profiles, "ha") {
		bad("etcd is not in the ha profile (profiles %v)", etcd.Profiles)
	}
	etcdPort := ""
	if u, err := url.Parse(argValue(etcd.Command, "--listen-client-urls")); err != nil || u.Scheme != "http" || u.Hostname() != "0.0.0.0" || u.Port() == "" {
		bad("etcd --listen-client-urls %q: want http://0.0.0.0:<port>, reachable from the other containers", argValue(etcd.Command, "--listen-client-urls"))
	} else {
		etcdPort = u.Port()
	}
	if got, want := argValue(etcd.Command, "--advertise-client-urls"), "http://"+etcdName+":"+etcdPort; got != want {
		bad("etcd --advertise-client-urls %q, want %q (its service name and client port)", got, want)
	}
	if hc := etcd.HealthCheck; hc == nil || hc.Disable || len(hc.Test) < 2 || hc.Test[0] != "CMD" ||
		filepath.Base(hc.Test[1]) != "etcdctl" || !strings.Contains(strings.Join(hc.Test, " "), "endpoint health") {
		bad("etcd's healthcheck is %+v; want [CMD etcdctl ... endpoint health] (the image has no shell)", etcd.HealthCheck)
	}
	dataDir := argValue(etcd.Command, "--data-dir")
	if !slices.ContainsFunc(etcd.Volumes, func(v types.ServiceVolumeConfig) bool {
		_, named := p.Volumes[v.Source]
		return v.Type == types.VolumeTypeVolume && named && v.Target == dataDir
	}) {
		bad("etcd --data-dir %q is not on a named volume (volumes %+v)", dataDir, etcd.Volumes)
	}

	// The replicas: every router on --store etcd.
	published := map[string]string{} // host port -> service, over the whole project
	for name, s := range p.Services {
		for _, port := range s.Ports {
			if other, ok := published[port.Published]; ok {
				bad("%s and %s both publish host port %s", other, name, port.Published)
			}
			published[port.Published] = name
		}
	}
	routers := map[string]int{} // service -> container port
	var prefixes []string
	for _, name := range slices.Sorted(maps.Keys(p.Services)) {
		s := p.Services[name]
		if !usesBinary(s) || len(s.Command) == 0 || s.Command[0] != "serve" {
			continue
		}
		parseCommand(tb, "docker-compose.yml service "+name, s.Command)
		cfg := serveConfigOf(tb, s.Command[1:])
		if cfg.Store != app.StoreEtcd {
			continue
		}
		if !slices.Contains(s.Profiles, "ha") {
			bad("%s runs on etcd outside the ha profile (profiles %v)", name, s.Profiles)
		}
		if err := cfg.Validate(); err != nil {
			bad("%s: %v", name, err)
		}
		if _, err := cfg.Verifier(); err != nil {
			bad("%s would not start: %v", name, err)
		}
		prefixes = append(prefixes, cfg.EtcdPrefix)
		for _, e := range cfg.EtcdEndpoints {
			if u, err := url.Parse(e); err != nil || u.Scheme != "http" || u.Hostname() != etcdName || u.Port() != etcdPort {
				bad("%s --etcd-endpoints %s: want http://%s:%s, the etcd service", name, e, etcdName, etcdPort)
			}
		}
		if d, ok := s.DependsOn[etcdName]; !ok || d.Condition != types.ServiceConditionHealthy {
			bad("%s does not wait for etcd to be healthy (depends_on %+v)", name, s.DependsOn)
		}
		_, port, err := net.SplitHostPort(cfg.Addr)
		if err != nil {
			bad("%s --addr %s: %v", name, cfg.Addr, err)
			continue
		}
		if u, err := url.Parse(cfg.AdvertiseURL); err != nil || u.Scheme != "http" || u.Hostname() != name || u.Port() != port || strings.Trim(u.Path, "/") != "" {
			bad("%s --advertise-url %q, want http://%s:%s: followers name it to clients, who reach the leader by its service name and container port", name, cfg.AdvertiseURL, name, port)
		}
		if len(s.Ports) != 1 || strconv.Itoa(int(s.Ports[0].Target)) != port || s.Ports[0].HostIP != "127.0.0.1" || s.Ports[0].Published == "" {
			bad("%s listens on %s and publishes %+v; want that port on 127.0.0.1 only", name, port, s.Ports)
		}
		nport, _ := strconv.Atoi(port)
		routers[name] = nport
	}
	if len(routers) < 2 {
		bad("the ha profile runs %d router(s) on etcd (%v); want at least two", len(routers), slices.Sorted(maps.Keys(routers)))
	}
	slices.Sort(prefixes)
	if prefixes = slices.Compact(prefixes); len(prefixes) > 1 {
		bad("the replicas use different --etcd-prefix values %v: they would not share a registration or a leader", prefixes)
	}

	// The registration: one one-shot curl job in the profile that sends
	// deploy/'s files to one replica, after that replica is up (not ready:
	// a follower never is).
	var regs []string
	for name, s := range p.Services {
		if !usesBinary(s) && slices.Contains(s.Profiles, "ha") && strings.Contains(strings.Join(s.Command, " "), "/deploy/policies.json") {
			regs = append(regs, name)
		}
	}
	if len(regs) != 1 {
		return append(problems, fmt.Sprintf("want one registration job in the ha profile, have %v", regs))
	}
	reg := p.Services[regs[0]]
	script := strings.Join(reg.Command, " ")
	target := ""
	for name, port := range routers {
		if strings.Contains(script, fmt.Sprintf("http://%s:%d/", name, port)) {
			target = name
		}
	}
	if target == "" {
		return append(problems, fmt.Sprintf("%s registers through none of the replicas %v:\n%s", regs[0], routers, script))
	}
	base := fmt.Sprintf("http://%s:%d", target, routers[target])
	for _, want := range []string{
		base + "/healthz",
		"-X PUT " + base + "/policies", "-X PUT " + base + "/topology",
		"@/deploy/policies.json", "@/deploy/topology.json",
	} {
		if !strings.Contains(script, want) {
			bad("%s's command lacks %q:\n%s", regs[0], want, script)
		}
	}
	if strings.Contains(script, "/readyz") {
		bad("%s waits on /readyz, which only the leader passes; wait on /healthz", regs[0])
	}
	if reg.Restart != "no" {
		bad("%s restarts (%q); it is a one-shot job", regs[0], reg.Restart)
	}
	deps := slices.Collect(maps.Keys(reg.DependsOn))
	for _, want := range append([]string{target}, slices.Collect(maps.Keys(fakePolicies(tb, p)))...) {
		if !slices.Contains(deps, want) {
			bad("%s does not depend on %s (depends_on %v)", regs[0], want, slices.Sorted(slices.Values(deps)))
		}
	}
	if !slices.ContainsFunc(reg.Volumes, func(v types.ServiceVolumeConfig) bool {
		return v.Target == "/deploy" && v.Source == filepath.Join(mustAbs(tb, composeRoot), "deploy")
	}) {
		bad("%s does not mount ./deploy at /deploy: %+v", regs[0], reg.Volumes)
	}
	return problems
}

// TestComposeHA checks the "ha" profile, and that it is off by default.
func TestComposeHA(t *testing.T) {
	for _, problem := range haProblems(t, loadCompose(t, "ha")) {
		t.Error(problem)
	}
	for name, s := range loadCompose(t).Services {
		if slices.Contains([]string{"etcd", "router-a", "router-b", "register-ha"}, name) || (usesBinary(s) && slices.Contains(s.Command, "etcd")) {
			t.Errorf("%s runs without the ha profile", name)
		}
	}
}

// TestComposeHAChecksFail breaks the ha profile one way at a time and
// expects haProblems to say so, so that the checks above cannot pass
// vacuously.
func TestComposeHAChecksFail(t *testing.T) {
	// replaceArg returns args with the value of --name replaced.
	replaceArg := func(args types.ShellCommand, name, value string) types.ShellCommand {
		out := slices.Clone(args)
		for i, a := range out {
			if a == name && i+1 < len(out) {
				out[i+1] = value
			}
		}
		return out
	}
	editService := func(name string, edit func(*types.ServiceConfig)) func(*types.Project) {
		return func(p *types.Project) {
			s, ok := p.Services[name]
			if !ok {
				t.Fatalf("no service %s", name)
			}
			edit(&s)
			p.Services[name] = s
		}
	}
	cases := map[string]func(*types.Project){
		"endpoint names another service": editService("router-b", func(s *types.ServiceConfig) {
			s.Command = replaceArg(s.Command, "--etcd-endpoints", "http://etcd-0:2379")
		}),
		"endpoint on the peer port": editService("router-a", func(s *types.ServiceConfig) {
			s.Command = replaceArg(s.Command, "--etcd-endpoints", "http://etcd:2380")
		}),
		"advertise names the other replica": editService("router-b", func(s *types.ServiceConfig) {
			s.Command = replaceArg(s.Command, "--advertise-url", "http://router-a:8080")
		}),
		"advertise names the published port": editService("router-a", func(s *types.ServiceConfig) {
			s.Command = replaceArg(s.Command, "--advertise-url", "http://router-a:8081")
		}),
		"advertise is the host's loopback": editService("router-a", func(s *types.ServiceConfig) {
			s.Command = replaceArg(s.Command, "--advertise-url", "http://127.0.0.1:8081")
		}),
		"a replica with a data dir": editService("router-a", func(s *types.ServiceConfig) {
			s.Command = append(slices.Clone(s.Command), "--data-dir", "/data")
		}),
		"a replica on another prefix": editService("router-b", func(s *types.ServiceConfig) {
			s.Command = append(slices.Clone(s.Command), "--etcd-prefix", "/other/")
		}),
		"a replica not waiting for etcd's health": editService("router-a", func(s *types.ServiceConfig) {
			s.DependsOn = types.DependsOnConfig{"etcd": {Condition: types.ServiceConditionStarted, Required: true}}
		}),
		"a replica published on every interface": editService("router-b", func(s *types.ServiceConfig) {
			s.Ports = []types.ServicePortConfig{{Target: 8080, Published: "8082", Protocol: "tcp"}}
		}),
		"both replicas on one host port": editService("router-b", func(s *types.ServiceConfig) {
			s.Ports = []types.ServicePortConfig{{HostIP: "127.0.0.1", Target: 8080, Published: "8081", Protocol: "tcp"}}
		}),
		"one replica": func(p *types.Project) { delete(p.Services, "router-b") },
		"etcd without a healthcheck": editService("etcd", func(s *types.ServiceConfig) {
			s.HealthCheck = nil
		}),
		"etcd advertising localhost": editService("etcd", func(s *types.ServiceConfig) {
			s.Command = replaceArg(s.Command, "--advertise-client-urls", "http://localhost:2379")
		}),
		"etcd on its container's loopback": editService("etcd", func(s *types.ServiceConfig) {
			s.Command = replaceArg(s.Command, "--listen-client-urls", "http://127.0.0.1:2379")
		}),
		"etcd at another version": editService("etcd", func(s *types.ServiceConfig) {
			s.Image = "gcr.io/etcd-development/etcd:v3.5.0"
		}),
		"registration through no replica": editService("register-ha", func(s *types.ServiceConfig) {
			s.Command = types.ShellCommand{strings.ReplaceAll(strings.Join(s.Command, " "), "router-a:", "router:")}
		}),
		"registration waiting for readiness": editService("register-ha", func(s *types.ServiceConfig) {
			s.Command = types.ShellCommand{strings.ReplaceAll(strings.Join(s.Command, " "), "/healthz", "/readyz")}
		}),
		"registration before the policies": editService("register-ha", func(s *types.ServiceConfig) {
			delete(s.DependsOn, "policy-b")
		}),
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			p := loadCompose(t, "ha")
			breakIt(p)
			if problems := haProblems(t, p); len(problems) == 0 {
				t.Error("haProblems found nothing wrong")
			} else {
				t.Logf("found: %s", strings.Join(problems, "; "))
			}
		})
	}
}
