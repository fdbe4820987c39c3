package auth

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestMintVerifyRoundTrip(t *testing.T) {
	k := testKeys(t)
	base := Config{Issuer: testIssuer, Audience: testAudience, Now: fixedNow}
	with := func(edit func(*Config)) Config {
		c := base
		edit(&c)
		return c
	}
	tests := []struct {
		name    string
		mint    Config
		verify  Config
		wantAlg string
	}{
		{"HS256", with(func(c *Config) { c.Secret = testSecret }), with(func(c *Config) { c.Secret = testSecret }), AlgHS256},
		{"RS256 PKCS1 private key", with(func(c *Config) { c.PrivateKeyPEM = k.rsaPKCS1 }), with(func(c *Config) { c.PublicKeyPEM = k.rsaPKIXPub }), AlgRS256},
		{"RS256 PKCS8 private key", with(func(c *Config) { c.PrivateKeyPEM = k.rsaPKCS8 }), with(func(c *Config) { c.PublicKeyPEM = k.rsaPKCS1Pub }), AlgRS256},
		{"EdDSA PKCS8 private key", with(func(c *Config) { c.PrivateKeyPEM = k.edPKCS8 }), with(func(c *Config) { c.PublicKeyPEM = k.edPKIXPub }), AlgEdDSA},
		{"no issuer or audience", Config{Secret: testSecret, Now: fixedNow}, Config{Secret: testSecret, Now: fixedNow}, AlgHS256},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := Mint(tt.mint, "trainer-3", []string{ScopeRoute, ScopeRead, ScopeRoute}, 10*time.Minute)
			if err != nil {
				t.Fatalf("Mint: %v", err)
			}
			if got := headerAlg(t, tok); got != tt.wantAlg {
				t.Errorf("alg = %q, want %q", got, tt.wantAlg)
			}
			v := mustVerifier(t, tt.verify)
			c, err := v.Verify(tok)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if got, want := c.Subject, "trainer-3"; got != want {
				t.Errorf("Subject = %q, want %q", got, want)
			}
			if got, want := c.Scopes, []string{ScopeRoute, ScopeRead}; !slices.Equal(got, want) {
				t.Errorf("Scopes = %q, want %q (duplicates dropped)", got, want)
			}
			if _, err := uuid.Parse(c.ID); err != nil {
				t.Errorf("ID %q is not a UUID: %v", c.ID, err)
			}
			if got, want := c.ExpiresAt, testNow.Add(10*time.Minute); !got.Equal(want) {
				t.Errorf("ExpiresAt = %v, want %v", got, want)
			}
		})
	}
}

// TestMintClaims reads the payload Mint writes.
func TestMintClaims(t *testing.T) {
	tok := mint(t, hsConfig(), "trainer-9", ScopeAdmin, ScopeRead)
	payload := decodeSegment(t, strings.Split(tok, ".")[1])
	var got map[string]any
	if err := json.Unmarshal(payload, &got); err != nil {
		t.Fatal(err)
	}
	now := float64(testNow.Unix())
	want := map[string]any{
		"iss":   testIssuer,
		"aud":   []any{testAudience},
		"sub":   "trainer-9",
		"scope": "admin read",
		"iat":   now,
		"nbf":   now,
		"exp":   now + 3600,
	}
	for k, w := range want {
		gotJSON, _ := json.Marshal(got[k])
		wantJSON, _ := json.Marshal(w)
		if string(gotJSON) != string(wantJSON) {
			t.Errorf("claim %s = %s, want %s", k, gotJSON, wantJSON)
		}
	}
	if _, ok := got["jti"].(string); !ok {
		t.Errorf("jti = %v, want a string", got["jti"])
	}
	// Two tokens minted at the same instant differ by jti.
	if a, b := mint(t, hsConfig(), "x", ScopeRead), mint(t, hsConfig(), "x", ScopeRead); a == b {
		t.Error("two minted tokens are identical; jti not random")
	}
}

func TestMintErrors(t *testing.T) {
	k := testKeys(t)
	hs := Config{Secret: testSecret}
	tests := []struct {
		name    string
		cfg     Config
		subject string
		scopes  []string
		ttl     time.Duration
		wantErr string
	}{
		{"no key", Config{}, "s", []string{ScopeRead}, time.Hour, "neither Secret nor PrivateKeyPEM"},
		{"public key only", Config{PublicKeyPEM: k.rsaPKIXPub}, "s", []string{ScopeRead}, time.Hour, "neither Secret nor PrivateKeyPEM"},
		{"both keys", Config{Secret: testSecret, PrivateKeyPEM: k.edPKCS8}, "s", []string{ScopeRead}, time.Hour, "both Secret and PrivateKeyPEM"},
		{"short secret", Config{Secret: []byte("0123456789")}, "s", []string{ScopeRead}, time.Hour, "at least 32"},
		{"public key as private", Config{PrivateKeyPEM: k.edPKIXPub}, "s", []string{ScopeRead}, time.Hour, `PEM block is "PUBLIC KEY"`},
		{"not PEM", Config{PrivateKeyPEM: []byte("secret")}, "s", []string{ScopeRead}, time.Hour, "no PEM block"},
		{"ECDSA key", Config{PrivateKeyPEM: k.ecdsaPriv}, "s", []string{ScopeRead}, time.Hour, "unsupported key type"},
		{"1024-bit RSA", Config{PrivateKeyPEM: k.smallRSAPriv}, "s", []string{ScopeRead}, time.Hour, "RSA key is 1024 bits"},
		{"empty subject", hs, "", []string{ScopeRead}, time.Hour, "subject is empty"},
		{"no scopes", hs, "s", nil, time.Hour, "no scopes"},
		{"unknown scope", hs, "s", []string{ScopeRead, "write"}, time.Hour, `unknown scope "write"`},
		{"scope with space", hs, "s", []string{"read route"}, time.Hour, "unknown scope"},
		{"zero ttl", hs, "s", []string{ScopeRead}, 0, "not positive"},
		{"negative ttl", hs, "s", []string{ScopeRead}, -time.Minute, "not positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := Mint(tt.cfg, tt.subject, tt.scopes, tt.ttl)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Mint = %q, %v; want error containing %q", tok, err, tt.wantErr)
			}
			if len(tt.cfg.Secret) > 0 && strings.Contains(err.Error(), string(tt.cfg.Secret)) {
				t.Errorf("error quotes the secret: %v", err)
			}
		})
	}
}

func decodeSegment(tb testing.TB, seg string) []byte {
	tb.Helper()
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		tb.Fatalf("decode segment: %v", err)
	}
	return b
}

func headerAlg(tb testing.TB, tok string) string {
	tb.Helper()
	var h struct {
		Alg string `json:"alg"`
	}
	if err := json.Unmarshal(decodeSegment(tb, strings.Split(tok, ".")[0]), &h); err != nil {
		tb.Fatalf("decode header: %v", err)
	}
	return h.Alg
}
