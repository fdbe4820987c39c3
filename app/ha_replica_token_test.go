package app

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/auth"
	"github.com/policyrouter/policyrouter/internal/etcdtest"
	"github.com/policyrouter/policyrouter/internal/poll"
)

// edKey is an Ed25519 key pair: the private key mints, as the operator's
// `policyrouter token --jwt-private-key`; the public key's file is the
// replicas' --jwt-public-key.
type edKey struct {
	private []byte // PKCS #8 PEM
	pubFile string
}

func newEdKey(t *testing.T) edKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pkix, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	pubFile := filepath.Join(t.TempDir(), "jwt.pub")
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pkix}), 0o600); err != nil {
		t.Fatal(err)
	}
	return edKey{private: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), pubFile: pubFile}
}

// mint returns a token of the key with scopes, valid for ttl from at.
func (k edKey) mint(t *testing.T, at time.Time, ttl time.Duration, scopes ...string) string {
	t.Helper()
	tok, err := auth.Mint(auth.Config{PrivateKeyPEM: k.private, Now: func() time.Time { return at }}, "test", scopes, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// writeToken puts tok in the file at path as a rotation does: written
// aside, then renamed over the old one, with a line ending.
func writeToken(t *testing.T, path, tok string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// generateOutcome is the answer to one streamed /generate: its status,
// its error code when not 200, and whether a 200's stream completed.
type generateOutcome struct {
	status   int
	code     string
	message  string
	complete bool
}

func generateOnce(t *testing.T, url, tok string) generateOutcome {
	t.Helper()
	res := generate(t, url, 8, map[string]string{"Authorization": "Bearer " + tok, "X-Select-Timeout-MS": "5000"})
	defer res.Body.Close()
	out := generateOutcome{status: res.StatusCode}
	if res.StatusCode == http.StatusOK {
		complete, err := streamOutcome(res.Body)
		out.complete = complete && err == nil
		return out
	}
	raw, _ := io.ReadAll(res.Body)
	var env api.ErrorResponse
	_ = json.Unmarshal(raw, &env)
	out.code, out.message = env.Error.Code, env.Error.Message
	return out
}

// generateUntil sends streamed /generate requests to url until one is
// answered as ok says, and returns that answer.
func generateUntil(t *testing.T, what, url, tok string, ok func(generateOutcome) bool) generateOutcome {
	t.Helper()
	var last generateOutcome
	poll.Until(t, what, func() bool {
		last = generateOnce(t, url, tok)
		if ok(last) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
		return false
	})
	return last
}

func proxied(o generateOutcome) bool { return o.status == http.StatusOK && o.complete }

// Replicas that only verify tokens (--jwt-public-key, Ed25519) proxy on
// followers with the token the operator put in --replica-token-file: a
// stream through the follower completes, a rotated file is read again
// without a restart, and a token the leader refuses (expired, without
// scope route) or a file without one is a 502 upstream_failed, logged.
func TestFollowerProxiesWithTheTokenFile(t *testing.T) {
	etcd := etcdtest.Start(t)
	fleet := newProxyFleet(t, 1)
	key := newEdKey(t)
	now := time.Now()
	tokenFile := filepath.Join(t.TempDir(), "replica-token")
	writeToken(t, tokenFile, key.mint(t, now, time.Hour, auth.ScopeRoute))
	withKey := func(c *Config) { c.JWTPublicKey, c.ReplicaTokenFile = key.pubFile, tokenFile }
	a := startReplica(t, etcd.Endpoint, "/ha-token-file/", withKey)
	b := startReplica(t, etcd.Endpoint, "/ha-token-file/", withKey)
	leader, followers := leaderOf(t, a, b)
	follower := followers[0]
	registerFleet(t, follower, leader, fleet, 1, key.mint(t, now, time.Hour, auth.ScopeAdmin))
	client := key.mint(t, now, time.Hour, auth.ScopeRoute)

	if o := generateOnce(t, follower.url, client); !proxied(o) {
		t.Fatalf("follower /generate with the token file = %+v; want 200, complete", o)
	}
	poll.Until(t, "the lease back on the leader", func() bool { return leader.app.State.Stats().Leases == 0 })
	if logs := follower.logs.String(); !strings.Contains(logs, "replica token: read") || strings.Contains(logs, "not_leader: with a public token key") {
		t.Errorf("follower log: want the token read, and proxying on:\n%s", logs)
	}

	// An expired token (beyond the leeway) is the leader's to refuse: 401.
	writeToken(t, tokenFile, key.mint(t, now.Add(-time.Hour), time.Minute, auth.ScopeRoute))
	o := generateUntil(t, "the expired token to be read and refused", follower.url, client, func(o generateOutcome) bool { return o.status != http.StatusOK })
	if o.status != http.StatusBadGateway || o.code != api.CodeUpstreamFailed || !strings.Contains(o.message, "refused this replica's token (401)") {
		t.Errorf("follower /generate, an expired token in the file = %+v; want 502 upstream_failed, refused (401)", o)
	}
	if logs := follower.logs.String(); !strings.Contains(logs, "does not verify with this replica's key") || !strings.Contains(logs, "the leader refused this replica's token") {
		t.Errorf("follower log: want the expired token warned of, and the refusal:\n%s", logs)
	}

	// A rotated token is presented again without a restart.
	writeToken(t, tokenFile, key.mint(t, time.Now(), time.Hour, auth.ScopeRoute))
	generateUntil(t, "the rotated token to be read", follower.url, client, proxied)

	// A token without scope route: the leader's 403.
	writeToken(t, tokenFile, key.mint(t, time.Now(), time.Hour, auth.ScopeRead, auth.ScopeAdmin))
	o = generateUntil(t, "the read/admin token to be read and refused", follower.url, client, func(o generateOutcome) bool { return o.status != http.StatusOK })
	if o.status != http.StatusBadGateway || o.code != api.CodeUpstreamFailed || !strings.Contains(o.message, "refused this replica's token (403)") {
		t.Errorf("follower /generate, a token without scope route = %+v; want 502 upstream_failed, refused (403)", o)
	}
	if logs := follower.logs.String(); !strings.Contains(logs, "lacks scope route") {
		t.Errorf("follower log: want the missing scope warned of:\n%s", logs)
	}

	// An emptied file: no token to present, at the next read.
	writeToken(t, tokenFile, key.mint(t, time.Now(), time.Hour, auth.ScopeRoute))
	generateUntil(t, "the good token back", follower.url, client, proxied)
	writeToken(t, tokenFile, "")
	o = generateUntil(t, "the empty file to be read", follower.url, client, func(o generateOutcome) bool { return o.status != http.StatusOK })
	if o.status != http.StatusBadGateway || o.code != api.CodeUpstreamFailed || !strings.Contains(o.message, "has no token") {
		t.Errorf("follower /generate, an empty token file = %+v; want 502 upstream_failed, no token", o)
	}
	if logs := follower.logs.String(); !strings.Contains(logs, "no token to present to the leader") || !strings.Contains(logs, "is empty") {
		t.Errorf("follower log: want the empty file named:\n%s", logs)
	}
	// A file that is gone: the same; written again, at the next call.
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	if o := generateOnce(t, follower.url, client); o.status != http.StatusBadGateway || o.code != api.CodeUpstreamFailed {
		t.Errorf("follower /generate, the token file gone = %+v; want 502 upstream_failed", o)
	}
	writeToken(t, tokenFile, key.mint(t, time.Now(), time.Hour, auth.ScopeRoute))
	if o := generateOnce(t, follower.url, client); !proxied(o) {
		t.Errorf("follower /generate, the token file back = %+v; want 200 at once", o)
	}
	// The leader leased every attempt it granted back.
	poll.Until(t, "no lease left on the leader", func() bool { return leader.app.State.Stats().Leases == 0 })
}

// With --jwt-secret and --replica-token-file, a follower presents the
// file's token rather than minting one: here one the leader refuses (no
// scope route), which a minted token would not be.
func TestTheTokenFileWinsOverTheSecret(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef-file-wins"
	etcd := etcdtest.Start(t)
	fleet := newProxyFleet(t, 1)
	mint := func(scopes ...string) string {
		tok, err := auth.Mint(auth.Config{Secret: []byte(secret)}, "test", scopes, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	tokenFile := filepath.Join(t.TempDir(), "replica-token")
	writeToken(t, tokenFile, mint(auth.ScopeRead))
	withBoth := func(c *Config) { c.JWTSecret, c.ReplicaTokenFile = secret, tokenFile }
	a := startReplica(t, etcd.Endpoint, "/ha-token-wins/", withBoth)
	b := startReplica(t, etcd.Endpoint, "/ha-token-wins/", withBoth)
	leader, followers := leaderOf(t, a, b)
	follower := followers[0]
	registerFleet(t, follower, leader, fleet, 1, mint(auth.ScopeAdmin))
	client := mint(auth.ScopeRoute)

	if o := generateOnce(t, follower.url, client); o.status != http.StatusBadGateway || !strings.Contains(o.message, "refused this replica's token (403)") {
		t.Errorf("follower /generate, the file's token without scope route = %+v; want 502, refused (403)", o)
	}
	if logs := follower.logs.String(); !strings.Contains(logs, "it does not mint one from --jwt-secret") {
		t.Errorf("follower log: want the file said to win over the secret:\n%s", logs)
	}
	writeToken(t, tokenFile, mint(auth.ScopeRoute))
	generateUntil(t, "the token of scope route to be read", follower.url, client, proxied)
}

// With --jwt-public-key and no --replica-token-file, followers answer
// generate traffic not_leader, and the log names the flag that would
// let them proxy.
func TestPublicKeyWithoutTheTokenFile(t *testing.T) {
	etcd := etcdtest.Start(t)
	key := newEdKey(t)
	withKey := func(c *Config) { c.JWTPublicKey = key.pubFile }
	a := startReplica(t, etcd.Endpoint, "/ha-no-token-file/", withKey)
	b := startReplica(t, etcd.Endpoint, "/ha-no-token-file/", withKey)
	_, followers := leaderOf(t, a, b)
	follower := followers[0]
	o := generateOnce(t, follower.url, key.mint(t, time.Now(), time.Hour, auth.ScopeRoute))
	if o.status != http.StatusServiceUnavailable || o.code != api.CodeNotLeader {
		t.Errorf("follower /generate without a token file = %+v; want 503 not_leader", o)
	}
	if logs := follower.logs.String(); !strings.Contains(logs, "--replica-token-file") {
		t.Errorf("follower log: want --replica-token-file named:\n%s", logs)
	}
}

// A token file that gives no token at start is an error of New, naming
// the flag.
func TestTokenFileReadAtStart(t *testing.T) {
	etcd := etcdtest.Start(t)
	key := newEdKey(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, path, want string }{
		{"missing", filepath.Join(dir, "missing"), "no such file"},
		{"empty", empty, "is empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{
				Store: StoreEtcd, EtcdEndpoints: []string{etcd.Endpoint}, EtcdPrefix: "/ha-token-start/", AdvertiseURL: "http://127.0.0.1:1",
				JWTPublicKey: key.pubFile, ReplicaTokenFile: tt.path, Logger: slog.New(slog.DiscardHandler),
			}
			a, err := New(t.Context(), cfg)
			if err == nil {
				_ = a.Close()
			}
			if err == nil || !strings.Contains(err.Error(), "--replica-token-file") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New with a %s token file = %v; want a --replica-token-file error with %q", tt.name, err, tt.want)
			}
		})
	}
}

// The file holds one token, white space around it dropped; it is read
// again once recheck has passed, and at once after a failed read.
func TestTokenFileReads(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	for _, tt := range []struct{ name, content, want, err string }{
		{"line", "aaa.bbb.ccc\n", "aaa.bbb.ccc", ""},
		{"spaces", "  aaa.bbb.ccc \r\n\n", "aaa.bbb.ccc", ""},
		{"empty", "\n", "", "is empty"},
		{"two tokens", "aaa.bbb.ccc\nddd.eee.fff\n", "", "holds more than a token"},
		{"control", "aaa.b\x00b.ccc", "", "holds more than a token"},
		{"too long", strings.Repeat("a", auth.MaxTokenLen+1), "", "over 8192 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := readTokenFile(path)
			if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("readTokenFile(%q) = %q, %v; want %q, an error with %q", tt.content, got, err, tt.want, tt.err)
			}
		})
	}

	writeToken(t, path, "one.one.one")
	f := &tokenFile{path: path, logger: slog.New(slog.DiscardHandler), recheck: time.Hour}
	if tok, err := f.token(); tok != "one.one.one" || err != nil {
		t.Fatalf("token() = %q, %v", tok, err)
	}
	writeToken(t, path, "two.two.two")
	if tok, _ := f.token(); tok != "one.one.one" {
		t.Errorf("token() within recheck = %q; want the token read before", tok)
	}
	f.recheck = 0
	if tok, _ := f.token(); tok != "two.two.two" {
		t.Errorf("token() after recheck = %q; want the rotated one", tok)
	}
	f.recheck = time.Hour
	writeToken(t, path, "")
	if tok, err := f.token(); err == nil {
		// Still within recheck of the last good read: that token stands.
		if tok != "two.two.two" {
			t.Errorf("token() = %q", tok)
		}
	}
	f.recheck = 0
	if _, err := f.token(); err == nil || !strings.Contains(err.Error(), "--replica-token-file") {
		t.Errorf("token() of an empty file = %v; want a --replica-token-file error", err)
	}
	f.recheck = time.Hour
	writeToken(t, path, "three.three.three")
	if tok, err := f.token(); tok != "three.three.three" || err != nil {
		t.Errorf("token() after a failed read = %q, %v; want the new token at once", tok, err)
	}
}
