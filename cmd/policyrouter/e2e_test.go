package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/client"
	"github.com/policyrouter/policyrouter/internal/prereq"
	"github.com/policyrouter/policyrouter/internal/syncbuf"
)

// binary is the policyrouter binary built once for the end-to-end tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "policyrouter-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "policyrouter")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build policyrouter: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running policyrouter process.
type proc struct {
	cmd    *exec.Cmd
	addr   string
	stderr *syncbuf.Buffer
	done   chan error
}

// start runs the binary with args (JSON logs) and waits for its listening
// line. The process is killed at the end of the test if still running.
func start(tb testing.TB, env []string, args ...string) *proc {
	tb.Helper()
	cmd := exec.Command(binary, append(args, "--log-format", "json")...)
	cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	p := &proc{cmd: cmd, stderr: &syncbuf.Buffer{}, done: make(chan error, 1)}
	// The buffer first: whatever the scanner sees is in it already.
	cmd.Stderr = io.MultiWriter(p.stderr, pw)
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() { p.done <- cmd.Wait(); pw.Close() }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "policyrouter listening" {
				addr <- line.Addr
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case p.addr = <-addr:
	case err := <-p.done:
		tb.Fatalf("policyrouter %v exited before listening: %v\n%s", args, err, p.stderr)
	case <-time.After(30 * time.Second):
		tb.Fatalf("policyrouter %v did not start:\n%s", args, p.stderr)
	}
	return p
}

// stop sends SIGTERM and returns the exit error (nil for exit 0).
func (p *proc) stop(tb testing.TB) error {
	tb.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		tb.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		tb.Fatalf("no exit within 30s of SIGTERM:\n%s", p.stderr)
		return nil
	}
}

func post(tb testing.TB, url, token, body string) (int, string) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// freeAddrs returns n distinct loopback addresses that were free a moment
// ago (all held open together, so no two are the same port).
func freeAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		defer ln.Close()
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs
}

// TestREADMEWalkthrough runs the curl walk-through (docs/walkthrough.md,
// which the README links) as written, on free ports, and checks what it
// prints.
func TestREADMEWalkthrough(t *testing.T) {
	prereq.LookPath(t, "curl", "apt-get install curl; .ci/run installs it")
	readme, err := os.ReadFile("../../docs/walkthrough.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(readme)
	if !strings.HasPrefix(section, "# Walk-through with curl\n") {
		t.Fatal("docs/walkthrough.md is no longer the walk-through")
	}
	// The examples docExamples says this test runs are its blocks.
	for _, e := range docExamples {
		if e.runBy == "TestREADMEWalkthrough" {
			docBlock(t, e.file, e.marker)
		}
	}
	var script strings.Builder
	for _, block := range strings.Split(section, "```sh\n")[1:] {
		script.WriteString(block[:strings.Index(block, "```")])
	}
	addrs := freeAddrs(t, 2)
	routerAddr, policyAddr := addrs[0], addrs[1]
	s := script.String()
	for _, want := range []string{"go build -o policyrouter ./cmd/policyrouter\n", "127.0.0.1:8080", "127.0.0.1:9100", "./policyrouter serve &"} {
		if !strings.Contains(s, want) {
			t.Fatalf("walk-through no longer contains %q; update this test with it", want)
		}
	}
	// The binary is built already; ports are free ones.
	s = strings.Replace(s, "go build -o policyrouter ./cmd/policyrouter\n", "", 1)
	s = strings.ReplaceAll(s, "127.0.0.1:8080", routerAddr)
	s = strings.ReplaceAll(s, "127.0.0.1:9100", policyAddr)
	s = "set -euo pipefail\n" + s + "\nkill %1 %2\nwait\n"

	out := runScript(t, "walk-through", s, "POLICYROUTER_ADDR="+routerAddr)
	for _, want := range []string{
		`"assignments":[3,1,3,1]`,
		`"assignments":[0,2]`,
		`"node_id":"node-b","lease_id":`,
		`{"released":`, // true, or false when the poller freed it first
		`"state":"idle"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("walk-through output lacks %s:\n%s", want, out)
		}
	}
}

// runScript runs a README snippet with bash, in a directory holding the
// binary as ./policyrouter, with JSON logs and env added, for at most a
// minute; then it kills what the script left running and returns its
// stdout. A failing script fails the test.
func runScript(tb testing.TB, what, script string, env ...string) string {
	tb.Helper()
	dir := tb.TempDir()
	if err := os.Symlink(binary, filepath.Join(dir, "policyrouter")); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "POLICYROUTER_LOG_FORMAT=json"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The script's background processes share its output pipes: on a
	// timeout kill the whole group, and do not wait on the pipes forever.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err != nil {
		tb.Fatalf("%s failed: %v\nstdout:\n%s\nstderr:\n%s", what, err, &stdout, &stderr)
	}
	return stdout.String()
}

func TestSIGTERMDrainsWaitingSelect(t *testing.T) {
	p := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--poll-interval", "0")
	base := "http://" + p.addr
	if code, body := post(t, base+"/policies", "", `{"url":"http://127.0.0.1:9/"}`); code != 201 {
		t.Fatalf("register: %d %s", code, body)
	}
	if code, body := post(t, base+"/select", "", `{}`); code != 200 {
		t.Fatalf("select: %d %s", code, body)
	}
	c := client.New(base, nil)
	waiting := make(chan error, 1)
	go func() {
		_, err := c.Select(context.Background(), api.SelectRequest{TimeoutMS: new(60000)})
		waiting <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := c.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Waiters == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second select never waited")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, p.stderr)
	}
	var ce *client.Error
	if err := <-waiting; !errors.As(err, &ce) || ce.StatusCode != http.StatusServiceUnavailable || ce.Code != api.CodeShuttingDown {
		t.Errorf("waiting select at shutdown answered %v; want 503 %s", err, api.CodeShuttingDown)
	}
	if !strings.Contains(p.stderr.String(), `"msg":"stopped"`) {
		t.Errorf("no clean stop logged:\n%s", p.stderr)
	}
}

// On a non-loopback address the router needs a token key or --insecure
// (the transport is dealt with by --behind-tls-proxy here; see
// TestNonLoopbackNeedsTLSOrProxy).
func TestNonLoopbackNeedsKeyOrInsecure(t *testing.T) {
	out, err := exec.Command(binary, "serve", "--addr", "0.0.0.0:0", "--behind-tls-proxy").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(string(out), "refusing to serve without authentication") {
		t.Fatalf("non-loopback bind without a key: err=%v output=%s", err, out)
	}
	p := start(t, nil, "serve", "--addr", "0.0.0.0:0", "--insecure", "--behind-tls-proxy")
	if !strings.Contains(p.stderr.String(), "WITHOUT authentication") {
		t.Errorf("--insecure start not warned about:\n%s", p.stderr)
	}
	if err := p.stop(t); err != nil {
		t.Fatalf("exit: %v", err)
	}
	// With a key a non-loopback bind is fine.
	p = start(t, []string{"POLICYROUTER_JWT_SECRET=" + strings.Repeat("k", 40)}, "serve", "--addr", "0.0.0.0:0", "--behind-tls-proxy")
	if err := p.stop(t); err != nil {
		t.Fatalf("exit: %v", err)
	}
}

func TestTokensAndSecretsStayOutOfLogs(t *testing.T) {
	secret := "s3cr3t-" + strings.Repeat("x", 40)
	p := start(t, []string{"POLICYROUTER_JWT_SECRET=" + secret}, "serve", "--addr", "127.0.0.1:0", "--log-level", "debug")
	mint := func(scope string) string {
		out, err := exec.Command(binary, "token", "--jwt-secret", secret, "--scope", scope, "--ttl", "1h").Output()
		if err != nil {
			t.Fatalf("token: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	admin, route := mint("admin"), mint("route")
	base := "http://" + p.addr
	tests := []struct {
		name, path, token string
		want              int
	}{
		{"no token", "/select", "", 401},
		{"garbage token", "/select", "garbage.token.here", 401},
		{"token signed with another secret", "/select", forge(t), 401},
		{"admin token on a route endpoint", "/select", admin, 403},
		{"route token", "/assign", route, 503},
		{"admin registers", "/policies", admin, 201},
	}
	for _, tt := range tests {
		body := `{"num_tasks":1}`
		if tt.path == "/policies" {
			body = `{"url":"http://127.0.0.1:9/"}`
		} else if tt.path == "/select" {
			body = `{"timeout_ms":0}`
		}
		if code, b := post(t, base+tt.path, tt.token, body); code != tt.want {
			t.Errorf("%s: %d %s, want %d", tt.name, code, b, tt.want)
		}
	}
	if err := p.stop(t); err != nil {
		t.Fatal(err)
	}
	logs := p.stderr.String()
	for name, s := range map[string]string{"secret": secret, "admin token": admin, "route token": route} {
		if strings.Contains(logs, s) {
			t.Errorf("the %s appears in the logs", name)
		}
	}
	if !strings.Contains(logs, `"status":401`) {
		t.Errorf("requests not logged:\n%s", logs)
	}
}

// forge mints a token with a secret the server does not know.
func forge(tb testing.TB) string {
	tb.Helper()
	out, err := exec.Command(binary, "token", "--jwt-secret", strings.Repeat("z", 40), "--scope", "route").Output()
	if err != nil {
		tb.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// runBinary runs the binary to completion and returns its combined output.
func runBinary(args ...string) (string, error) {
	out, err := exec.Command(binary, args...).CombinedOutput()
	return string(out), err
}

// pythonWithHTTPX returns the Python that has the client's one dependency,
// httpx: Debian's /usr/bin/python3 with python3-httpx (.ci/run installs
// it; the test then fails rather than skips without it).
func pythonWithHTTPX(tb testing.TB) string {
	tb.Helper()
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import httpx").Run(); err != nil {
		prereq.Missing(tb, "%s cannot import httpx (apt-get install python3-httpx): %v", python, err)
	}
	return python
}

// TestREADMEPythonExample runs the Python example of docs/python.md, as
// printed, against the demo. It is the script the page names,
// clients/python/examples/seed_adapters.py, shown whole.
func TestREADMEPythonExample(t *testing.T) {
	python := pythonWithHTTPX(t)
	readme, err := os.ReadFile("../../docs/python.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "```python\n")
	if !ok {
		t.Fatal("docs/python.md has no python example")
	}
	example, _, _ := strings.Cut(after, "```")
	const script = "clients/python/examples/seed_adapters.py"
	if !strings.Contains(string(readme), script) {
		t.Errorf("docs/python.md does not name %s", script)
	}
	if file, err := os.ReadFile("../../" + script); err != nil || string(file) != example {
		t.Errorf("docs/python.md's python example is not %s as it is (%v)", script, err)
	}
	p := start(t, nil, "demo", "--addr", "127.0.0.1:0", "--workers", "2")
	example = strings.ReplaceAll(example, "127.0.0.1:8080", p.addr)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "example.py"), []byte(example), 0o644); err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs("../..")
	cmd := exec.Command(python, "example.py")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "clients/python"), "POLICYROUTER_URL=http://"+p.addr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("example failed: %v\n%s", err, out)
	}
	for _, want := range []string{"assign: [1, 3, 4]", "select: policy ", "policies by state:"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("example output lacks %q:\n%s", want, out)
		}
	}
	if err := p.stop(t); err != nil {
		t.Fatal(err)
	}
}
