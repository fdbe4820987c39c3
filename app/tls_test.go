package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/internal/testpki"
	"github.com/policyrouter/policyrouter/registry"
	"github.com/policyrouter/policyrouter/routing"
)

// serveApp builds an app from cfg, serves it on a loopback port until the
// test ends, and returns its address.
func serveApp(tb testing.TB, cfg Config) (*App, string) {
	tb.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := New(ctx, cfg)
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		_ = a.Close()
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Serve: %v", err)
		}
	})
	return a, ln.Addr().String()
}

// httpsClient trusts roots and presents certs; it speaks HTTP/2 when the
// server offers it. Its connections close when the test ends.
func httpsClient(tb testing.TB, roots *x509.CertPool, certs ...tls.Certificate) *http.Client {
	tb.Helper()
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: certs},
		ForceAttemptHTTP2: true,
	}
	tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func get(c *http.Client, url string) (*http.Response, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

// HTTPS serves, over HTTP/2, at TLS 1.2 or later; plain HTTP to the same
// port and TLS 1.1 get no answer from the API.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "test CA")
	certFile, keyFile := ca.Server(t, "router").Write(t, dir, "server")
	_, addr := serveApp(t, Config{TLSCert: certFile, TLSKey: keyFile})

	resp, err := get(httpsClient(t, ca.Pool()), "https://"+addr+"/healthz")
	if err != nil {
		t.Fatalf("GET over HTTPS: %v", err)
	}
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 || resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Errorf("GET over HTTPS: status %d, %s, TLS %+v; want 200 over HTTP/2 and TLS >= 1.2", resp.StatusCode, resp.Proto, resp.TLS)
	}

	plain := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{}}
	defer plain.CloseIdleConnections()
	if resp, err := get(plain, "http://"+addr+"/healthz"); err == nil && resp.StatusCode == http.StatusOK {
		t.Errorf("plain HTTP to the TLS port answered 200")
	}

	old := httpsClient(t, ca.Pool())
	old.Transport.(*http.Transport).TLSClientConfig.MaxVersion = tls.VersionTLS11
	if _, err := get(old, "https://"+addr+"/healthz"); err == nil {
		t.Errorf("a TLS 1.1 client was served")
	}
}

// With a client CA, only clients with a certificate it signed are served.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := testpki.NewCA(t, "router CA"), testpki.NewCA(t, "other CA")
	certFile, keyFile := ca.Server(t, "router").Write(t, dir, "server")
	clientCA := testpki.NewCA(t, "client CA")
	_, addr := serveApp(t, Config{TLSCert: certFile, TLSKey: keyFile, TLSClientCA: clientCA.WriteCert(t, dir, "clients.crt")})
	url := "https://" + addr + "/healthz"

	resp, err := get(httpsClient(t, ca.Pool(), clientCA.Client(t, "trainer").TLS()), url)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("client with a certificate of the client CA: %v, %v; want 200", resp, err)
	}
	for name, c := range map[string]*http.Client{
		"no certificate":               httpsClient(t, ca.Pool()),
		"certificate of another CA":    httpsClient(t, ca.Pool(), other.Client(t, "intruder").TLS()),
		"server certificate as client": httpsClient(t, ca.Pool(), ca.Server(t, "router").TLS()),
	} {
		if resp, err := get(c, url); err == nil {
			t.Errorf("client with %s: served %d; want a TLS error", name, resp.StatusCode)
		}
	}
}

// A renewed certificate is served without a restart; a pair that does not
// load keeps the old one.
func TestCertificateReload(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "test CA")
	certFile, keyFile := ca.Server(t, "first").Write(t, dir, "server")
	kp, err := loadKeyPair(certFile, keyFile, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	kp.now = func() time.Time { return now }
	served := func() string { return kp.current().Leaf.Subject.CommonName }

	ca.Server(t, "second").Write(t, dir, "server")
	if got := served(); got != "first" {
		t.Errorf("served %q before the next check; want first", got)
	}
	now = now.Add(certCheckEvery)
	if got := served(); got != "second" {
		t.Errorf("served %q after the files changed; want second", got)
	}

	// A certificate whose key is not in the key file: the old pair stays.
	third := ca.Server(t, "third")
	third.Write(t, dir, "server")
	ca.Server(t, "fourth").Write(t, dir, "other")
	if err := os.Rename(filepath.Join(dir, "other.key"), keyFile); err != nil {
		t.Fatal(err)
	}
	now = now.Add(certCheckEvery)
	if got := served(); got != "second" {
		t.Errorf("served %q after a mismatched pair; want second still", got)
	}
	// Missing files: the old pair stays.
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	now = now.Add(certCheckEvery)
	if got := served(); got != "second" {
		t.Errorf("served %q with the key file gone; want second still", got)
	}
	third.Write(t, dir, "server")
	now = now.Add(certCheckEvery)
	if got := served(); got != "third" {
		t.Errorf("served %q once the pair is whole again; want third", got)
	}
}

// The reload reaches handshakes of a running server.
func TestServedCertificateRotates(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "test CA")
	certFile, keyFile := ca.Server(t, "first").Write(t, dir, "server")
	_, addr := serveApp(t, Config{TLSCert: certFile, TLSKey: keyFile})
	servedCN := func() string {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool()})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := servedCN(); got != "first" {
		t.Fatalf("served %q; want first", got)
	}
	ca.Server(t, "second").Write(t, dir, "server")
	poll.Until(t, "the second certificate to be served", func() bool { return servedCN() == "second" })
}

// Probes of an https:// policy trust --policy-ca and present the client
// certificate; without the CA the policy is unhealthy, and last_error says
// why.
func TestPolicyOverHTTPS(t *testing.T) {
	dir := t.TempDir()
	policyCA, routerCA := testpki.NewCA(t, "policy CA"), testpki.NewCA(t, "router client CA")
	policy := testpki.IdlePolicy(t, policyCA, routerCA)
	caFile := policyCA.WriteCert(t, dir, "policy-ca.crt")
	clientCert, clientKey := routerCA.Client(t, "router").Write(t, dir, "router-client")

	for _, tc := range []struct {
		name      string
		cfg       Config
		wantState string
		wantErr   string
	}{
		{"private CA and client certificate", Config{PolicyCA: caFile, PolicyClientCert: clientCert, PolicyClientKey: clientKey}, routing.StateIdle, ""},
		{"no CA", Config{PolicyClientCert: clientCert, PolicyClientKey: clientKey}, routing.StateUnhealthy, "certificate"},
		{"no client certificate", Config{PolicyCA: caFile}, routing.StateUnhealthy, "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.PollInterval = 20 * time.Millisecond
			tc.cfg.Logger = slog.New(slog.DiscardHandler)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			a, err := New(ctx, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if _, _, err := a.Registry.Register(ctx, registry.Spec{URL: policy.URL}); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			wg.Go(func() { _ = a.Run(ctx) })
			var got routing.PolicyStats
			poll.Until(t, "the policy state "+tc.wantState, func() bool {
				got = a.State.Stats().Policies[0]
				return got.State == tc.wantState
			})
			t.Logf("state %s, last_error %q", got.State, got.LastError)
			if tc.wantErr == "" && got.LastError != "" || !strings.Contains(got.LastError, tc.wantErr) {
				t.Errorf("last_error %q; want one containing %q", got.LastError, tc.wantErr)
			}
		})
	}
}

// A client that does not finish its request headers is cut off after
// ReadHeaderTimeout.
func TestSlowHeaderCutOff(t *testing.T) {
	_, addr := serveApp(t, Config{ReadHeaderTimeout: 100 * time.Millisecond})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: router\r\n"); err != nil {
		t.Fatal(err)
	}
	// Generous: a shared machine may be slow, but a connection left open
	// would block here for the whole deadline and fail.
	if err := conn.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open 20s after a 100ms header timeout")
	}
	if bytes.Contains(got, []byte("200 OK")) {
		t.Errorf("a request with unfinished headers was answered: %q", got)
	}
}

// --tls-client-ca is read again when it changes: a client of the new CA
// is served, one of the old CA is refused (its client keeps a session
// cache, so it tries to resume the session it had),
// and a file that does not load keeps the CAs in force.
func TestClientCAReload(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "router CA")
	certFile, keyFile := ca.Server(t, "router").Write(t, dir, "server")
	first, second := testpki.NewCA(t, "first client CA"), testpki.NewCA(t, "second client CA")
	caFile := first.WriteCert(t, dir, "clients")
	_, addr := serveApp(t, Config{TLSCert: certFile, TLSKey: keyFile, TLSClientCA: caFile})
	url := "https://" + addr + "/healthz"
	// New connections every time, resuming sessions when they can.
	client := func(cert tls.Certificate) *http.Client {
		c := httpsClient(t, ca.Pool(), cert)
		tr := c.Transport.(*http.Transport)
		tr.DisableKeepAlives = true
		tr.TLSClientConfig.ClientSessionCache = tls.NewLRUClientSessionCache(4)
		return c
	}
	old, next := client(first.Client(t, "old").TLS()), client(second.Client(t, "new").TLS())
	served := func(c *http.Client) bool {
		resp, err := get(c, url)
		return err == nil && resp.StatusCode == http.StatusOK
	}
	firstTime, resumed := served(old), served(old) // the second call resumes the session
	if !firstTime || !resumed || served(next) {
		t.Fatal("before the change: want the first CA's client served (twice, resuming), the second's refused")
	}

	if err := os.WriteFile(caFile, pemOf(t, second), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(certCheckEvery + 100*time.Millisecond)
	served(next) // the first handshake after the period reloads
	if !served(next) {
		t.Error("after the change: the second CA's client is refused")
	}
	if served(old) {
		t.Error("after the change: the first CA's client is still served")
	}

	// A file that does not load: the second CA stays in force.
	if err := os.WriteFile(caFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(certCheckEvery + 100*time.Millisecond)
	if !served(next) || served(old) {
		t.Error("after a broken file: want the second CA's client served still, the first's refused")
	}
}

// pemOf returns the PEM certificate of ca.
func pemOf(tb testing.TB, ca *testpki.CA) []byte {
	tb.Helper()
	b, err := os.ReadFile(ca.WriteCert(tb, tb.TempDir(), "ca"))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
