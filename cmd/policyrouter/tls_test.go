package main

// End-to-end tests of transport security against the real binary: HTTPS
// with HTTP/2, mutual TLS combined with bearer tokens, certificate
// rotation, HTTPS policies with a private CA, the plain-text refusal, the
// status command over mutual TLS, and --max-waiters.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/client"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/internal/prereq"
	"github.com/policyrouter/policyrouter/internal/testpki"
)

// tlsClient trusts roots and presents certs, over HTTP/2 when offered.
func tlsClient(tb testing.TB, roots *x509.CertPool, certs ...tls.Certificate) *http.Client {
	tb.Helper()
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: certs},
		ForceAttemptHTTP2: true,
	}
	tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// tlsCall sends one request and returns the status, the body and the answer's
// protocol; err is a transport error (TLS refusals included).
func tlsCall(c *http.Client, method, url, token, body string) (int, string, string, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, "", "", err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Proto, nil
}

// mintToken mints a token with the binary's token command.
func mintToken(tb testing.TB, secret, scope string) string {
	tb.Helper()
	out, err := exec.Command(binary, "token", "--jwt-secret", secret, "--scope", scope, "--ttl", "1h").Output()
	if err != nil {
		tb.Fatalf("token: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestTLSAndMutualTLS runs the router with a certificate, a client CA and a
// token key: a client needs both a certificate of the client CA and a
// token with the route's scope; HTTP/2 is spoken; plain HTTP and a
// certificate of another CA are refused; a renewed certificate is served
// without a restart; and `status` works over mutual TLS.
func TestTLSAndMutualTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA, otherCA := testpki.NewCA(t, "server CA"), testpki.NewCA(t, "client CA"), testpki.NewCA(t, "other CA")
	certFile, keyFile := serverCA.Server(t, "first").Write(t, dir, "server")
	clientCAFile := clientCA.WriteCert(t, dir, "client-ca.crt")
	serverCAFile := serverCA.WriteCert(t, dir, "server-ca.crt")
	trainerCert, trainerKey := clientCA.Client(t, "trainer").Write(t, dir, "trainer")
	secret := strings.Repeat("t", 40)
	p := start(t, []string{"POLICYROUTER_JWT_SECRET=" + secret, "POLICYROUTER_TLS_CLIENT_CA=" + clientCAFile},
		"serve", "--addr", "127.0.0.1:0", "--poll-interval", "0", "--tls-cert", certFile, "--tls-key", keyFile)
	base := "https://" + p.addr
	read := mintToken(t, secret, "read")
	trainer := tlsClient(t, serverCA.Pool(), clientCA.Client(t, "trainer").TLS())

	code, body, proto, err := tlsCall(trainer, "GET", base+"/stats", read, "")
	if err != nil || code != http.StatusOK || proto != "HTTP/2.0" {
		t.Fatalf("GET /stats with a client certificate and a read token: %d %s %s %v; want 200 over HTTP/2", code, proto, body, err)
	}
	// mTLS and tokens combine: the certificate gets the client in, the
	// token's scopes decide what it may do.
	if code, body, _, err := tlsCall(trainer, "GET", base+"/stats", "", ""); err != nil || code != http.StatusUnauthorized {
		t.Errorf("client certificate without a token: %d %s %v; want 401", code, body, err)
	}
	if code, body, _, err := tlsCall(trainer, "PUT", base+"/topology", read, `{}`); err != nil || code != http.StatusForbidden {
		t.Errorf("client certificate with a read token on an admin route: %d %s %v; want 403", code, body, err)
	}
	for name, c := range map[string]*http.Client{
		"no client certificate":              tlsClient(t, serverCA.Pool()),
		"a client certificate of another CA": tlsClient(t, serverCA.Pool(), otherCA.Client(t, "intruder").TLS()),
	} {
		if code, _, _, err := tlsCall(c, "GET", base+"/stats", read, ""); err == nil {
			t.Errorf("%s: served %d; want a TLS refusal", name, code)
		}
	}
	plain := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
	defer plain.CloseIdleConnections()
	if code, body, _, err := tlsCall(plain, "GET", "http://"+p.addr+"/stats", read, ""); err == nil && code == http.StatusOK {
		t.Errorf("plain HTTP to the TLS port answered 200: %s", body)
	}

	// status over mutual TLS; without --ca the certificate is not trusted.
	var out bytes.Buffer
	statusArgs := []string{"--url", base, "--token", read, "--ca", serverCAFile, "--cert", trainerCert, "--key", trainerKey}
	if err := statusCommand(context.Background(), &out, statusArgs); err != nil || !strings.Contains(out.String(), "0 policies") {
		t.Errorf("status over mutual TLS: %v\n%s", err, out.String())
	}
	if err := statusCommand(context.Background(), io.Discard, statusArgs[:4]); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("status without --ca: %v; want a certificate error", err)
	}

	// Rotation: new files are served without a restart.
	servedCN := func() string {
		conn, err := tls.Dial("tcp", p.addr, &tls.Config{RootCAs: serverCA.Pool(), Certificates: []tls.Certificate{clientCA.Client(t, "probe").TLS()}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := servedCN(); got != "first" {
		t.Fatalf("served %q; want first", got)
	}
	serverCA.Server(t, "second").Write(t, dir, "server")
	poll.Until(t, "the second certificate to be served", func() bool { return servedCN() == "second" })
	if code, _, _, err := tlsCall(trainer, "GET", base+"/stats", read, ""); err != nil || code != http.StatusOK {
		t.Errorf("GET /stats after the rotation: %d %v", code, err)
	}
	if err := p.stop(t); err != nil {
		t.Fatalf("exit: %v", err)
	}
}

// TestHTTPSPolicies registers an https:// policy whose certificate a
// private CA signed, and that requires a client certificate: with
// --policy-ca and the client certificate it is probed healthy; without the
// CA it is unhealthy, and /stats and `status` show the certificate error.
func TestHTTPSPolicies(t *testing.T) {
	dir := t.TempDir()
	policyCA, routerClientCA := testpki.NewCA(t, "policy CA"), testpki.NewCA(t, "router client CA")
	policy := testpki.IdlePolicy(t, policyCA, routerClientCA)
	caFile := policyCA.WriteCert(t, dir, "policy-ca.crt")
	clientCert, clientKey := routerClientCA.Client(t, "router").Write(t, dir, "router-client")

	for _, tc := range []struct {
		name      string
		args      []string
		wantState string
		wantErr   string
	}{
		{"private CA", []string{"--policy-ca", caFile, "--policy-client-cert", clientCert, "--policy-client-key", clientKey}, "idle", ""},
		{"no CA", []string{"--policy-client-cert", clientCert, "--policy-client-key", clientKey}, "unhealthy", "certificate signed by unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t, nil, append([]string{"serve", "--addr", "127.0.0.1:0", "--poll-interval", "50ms"}, tc.args...)...)
			base := "http://" + p.addr
			if code, body := post(t, base+"/policies", "", `{"url":"`+policy.URL+`"}`); code != http.StatusCreated {
				t.Fatalf("register: %d %s", code, body)
			}
			var got api.PolicyStats
			poll.Until(t, "the policy state "+tc.wantState, func() bool {
				got = policyStats(t, base)
				return got.State == tc.wantState
			})
			if tc.wantErr == "" && got.LastError != "" || !strings.Contains(got.LastError, tc.wantErr) {
				t.Errorf("last_error %q; want one containing %q", got.LastError, tc.wantErr)
			}
			var out bytes.Buffer
			err := statusCommand(context.Background(), &out, []string{"--url", base})
			if tc.wantErr != "" && (!errors.Is(err, errUnhealthy) || !strings.Contains(out.String(), tc.wantErr)) {
				t.Errorf("status: %v; want errUnhealthy and the certificate error in:\n%s", err, out.String())
			}
			if err := p.stop(t); err != nil {
				t.Fatalf("exit: %v", err)
			}
		})
	}
}

// policyStats returns the first policy of GET {base}/stats.
func policyStats(tb testing.TB, base string) api.PolicyStats {
	tb.Helper()
	s, err := client.New(base, nil).Stats(context.Background())
	if err != nil || len(s.Policies) == 0 {
		tb.Fatalf("GET /stats: %v, %d policies", err, len(s.Policies))
	}
	return s.Policies[0]
}

// TestNonLoopbackNeedsTLSOrProxy: plain HTTP on a non-loopback address is
// refused, with a message naming --tls-cert and --behind-tls-proxy, even
// with --insecure (which is about tokens); TLS or the escape hatch starts.
func TestNonLoopbackNeedsTLSOrProxy(t *testing.T) {
	out, err := runBinary("serve", "--addr", "0.0.0.0:0", "--insecure")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(out, "refusing to serve plain HTTP") ||
		!strings.Contains(out, "--tls-cert") || !strings.Contains(out, "--behind-tls-proxy") {
		t.Fatalf("non-loopback plain HTTP: err=%v output=%s", err, out)
	}
	p := start(t, []string{"POLICYROUTER_BEHIND_TLS_PROXY=true"}, "serve", "--addr", "0.0.0.0:0", "--insecure")
	if err := p.stop(t); err != nil {
		t.Fatalf("exit behind a TLS proxy: %v", err)
	}
	dir := t.TempDir()
	ca := testpki.NewCA(t, "CA")
	certFile, keyFile := ca.Server(t, "router").Write(t, dir, "server")
	p = start(t, nil, "serve", "--addr", "0.0.0.0:0", "--insecure", "--tls-cert", certFile, "--tls-key", keyFile)
	port := p.addr[strings.LastIndex(p.addr, ":"):]
	if code, body, _, err := tlsCall(tlsClient(t, ca.Pool()), "GET", "https://127.0.0.1"+port+"/healthz", "", ""); err != nil || code != http.StatusOK {
		t.Errorf("GET /healthz over HTTPS on 0.0.0.0: %d %s %v", code, body, err)
	}
	if err := p.stop(t); err != nil {
		t.Fatalf("exit with TLS: %v", err)
	}
}

// TestMaxWaiters: with --max-waiters 1, a second waiting /select is
// answered 503 overloaded with Retry-After.
func TestMaxWaiters(t *testing.T) {
	p := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--poll-interval", "0", "--max-waiters", "1")
	base := "http://" + p.addr
	if code, body := post(t, base+"/policies", "", `{"url":"http://127.0.0.1:9/"}`); code != http.StatusCreated {
		t.Fatalf("register: %d %s", code, body)
	}
	if code, body := post(t, base+"/select", "", `{}`); code != http.StatusOK {
		t.Fatalf("first select: %d %s", code, body)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		// Not post: it may not fail the test from this goroutine.
		if resp, err := http.Post(base+"/select", "application/json", strings.NewReader(`{"timeout_ms":60000}`)); err == nil {
			resp.Body.Close()
		}
	})
	poll.Until(t, "GET /stats", func() bool {
		s, err := client.New(base, nil).Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return s.Waiters == 1
	})
	// A plain request: the answer's Retry-After header is checked too.
	req, _ := http.NewRequest(http.MethodPost, base+"/select", strings.NewReader(`{"timeout_ms":60000}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var env api.ErrorResponse
	_ = json.NewDecoder(resp.Body).Decode(&env)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || env.Error.Code != api.CodeOverloaded || resp.Header.Get("Retry-After") == "" {
		t.Errorf("select beyond --max-waiters: %d %+v Retry-After %q; want 503 overloaded with Retry-After",
			resp.StatusCode, env.Error, resp.Header.Get("Retry-After"))
	}
	// SIGTERM ends the waiting select.
	if err := p.stop(t); err != nil {
		t.Fatalf("exit: %v", err)
	}
}

// TestREADMETLSStartup runs the three-command TLS start-up of
// docs/security.md as written (on a free port): openssl makes the
// certificate, the router serves it, curl trusts it.
func TestREADMETLSStartup(t *testing.T) {
	for _, tool := range []string{"openssl", "curl"} {
		prereq.LookPath(t, tool, "apt-get install "+tool+"; .ci/run installs it")
	}
	readme, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(readme)
	i := strings.Index(section, "## Transport security")
	if i < 0 {
		t.Fatal("docs/security.md has no Transport security section")
	}
	section = section[i:]
	block := section[strings.Index(section, "```sh\n")+len("```sh\n"):]
	block = block[:strings.Index(block, "```")]
	if block != docBlock(t, "docs/security.md", "openssl req") {
		t.Fatal("the TLS start-up is not the first example of its section")
	}
	if n := strings.Count(strings.TrimSpace(block), "\n") + 1; n != 3 {
		t.Errorf("the TLS start-up has %d commands; docs/security.md promises three", n)
	}
	for _, want := range []string{"openssl req", "./policyrouter serve --tls-cert", "https://127.0.0.1:8080/"} {
		if !strings.Contains(block, want) {
			t.Fatalf("TLS start-up no longer contains %q; update this test with it", want)
		}
	}
	addr := freeAddrs(t, 1)[0]
	script := "set -euo pipefail\n" + strings.ReplaceAll(block, "127.0.0.1:8080", addr) + "\nkill %1\nwait\n"
	out := runScript(t, "TLS start-up", script, "POLICYROUTER_ADDR="+addr)
	if !strings.Contains(out, `"status":"ok"`) {
		t.Errorf("curl over HTTPS printed %q; want the /healthz answer", out)
	}
}
