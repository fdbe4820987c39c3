package auth

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestNewVerifierConfig(t *testing.T) {
	k := testKeys(t)
	tests := []struct {
		name    string
		cfg     Config
		wantAlg string
		wantErr string // substring; "" means success
	}{
		{name: "HS256 secret", cfg: Config{Secret: testSecret}, wantAlg: AlgHS256},
		{name: "RS256 PKIX", cfg: Config{PublicKeyPEM: k.rsaPKIXPub}, wantAlg: AlgRS256},
		{name: "RS256 PKCS1", cfg: Config{PublicKeyPEM: k.rsaPKCS1Pub}, wantAlg: AlgRS256},
		{name: "EdDSA PKIX", cfg: Config{PublicKeyPEM: k.edPKIXPub}, wantAlg: AlgEdDSA},
		{name: "private key ignored", cfg: Config{Secret: testSecret, PrivateKeyPEM: k.rsaPKCS8}, wantAlg: AlgHS256},
		{name: "leeway set", cfg: Config{Secret: testSecret, Leeway: time.Second}, wantAlg: AlgHS256},
		{name: "no leeway", cfg: Config{Secret: testSecret, Leeway: NoLeeway}, wantAlg: AlgHS256},

		{name: "neither", cfg: Config{}, wantErr: "neither Secret nor PublicKeyPEM"},
		{name: "only private key", cfg: Config{PrivateKeyPEM: k.rsaPKCS8}, wantErr: "neither Secret nor PublicKeyPEM"},
		{name: "both", cfg: Config{Secret: testSecret, PublicKeyPEM: k.rsaPKIXPub}, wantErr: "both Secret and PublicKeyPEM"},
		{name: "short secret", cfg: Config{Secret: []byte("short-secret")}, wantErr: "secret is 12 bytes, at least 32"},
		{name: "31-byte secret", cfg: Config{Secret: bytes.Repeat([]byte("x"), 31)}, wantErr: "at least 32"},
		{name: "PEM as secret", cfg: Config{Secret: k.rsaPKIXPub}, wantErr: "secret looks like a PEM key"},
		{name: "negative leeway", cfg: Config{Secret: testSecret, Leeway: -time.Second}, wantErr: "negative"},
		{name: "negative leeway near NoLeeway", cfg: Config{Secret: testSecret, Leeway: NoLeeway - 1}, wantErr: "negative"},
		{name: "not PEM", cfg: Config{PublicKeyPEM: []byte("ssh-ed25519 AAAA")}, wantErr: "no PEM block"},
		{name: "private key as public", cfg: Config{PublicKeyPEM: k.rsaPKCS8}, wantErr: `PEM block is "PRIVATE KEY"`},
		{name: "corrupt DER", cfg: Config{PublicKeyPEM: []byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")}, wantErr: "auth: public key:"},
		{name: "ECDSA key", cfg: Config{PublicKeyPEM: k.ecdsaPub}, wantErr: "unsupported key type"},
		{name: "1024-bit RSA", cfg: Config{PublicKeyPEM: k.smallRSAPub}, wantErr: "RSA key is 1024 bits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := NewVerifier(tt.cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				if len(tt.cfg.Secret) > 0 && strings.Contains(err.Error(), string(tt.cfg.Secret)) {
					t.Errorf("error quotes the secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewVerifier: %v", err)
			}
			if got := v.Algorithm(); got != tt.wantAlg {
				t.Errorf("Algorithm() = %q, want %q", got, tt.wantAlg)
			}
		})
	}
}

// TestVerifierCopiesSecret checks that changing the caller's slice after
// NewVerifier changes nothing.
func TestVerifierCopiesSecret(t *testing.T) {
	secret := bytes.Clone(testSecret)
	v := mustVerifier(t, Config{Secret: secret, Now: fixedNow})
	tok := mint(t, Config{Secret: testSecret, Now: fixedNow}, "s", ScopeRead)
	for i := range secret {
		secret[i] = 'x'
	}
	if _, err := v.Verify(tok); err != nil {
		t.Errorf("Verify after the caller changed its secret slice: %v", err)
	}
}

func TestScopeClaimForms(t *testing.T) {
	v := mustVerifier(t, hsConfig())
	tests := []struct {
		name    string
		scope   any
		want    []string
		wantErr bool
	}{
		{name: "space separated", scope: "admin route read", want: []string{"admin", "route", "read"}},
		{name: "extra whitespace", scope: "  read\troute  ", want: []string{"read", "route"}},
		{name: "single", scope: "read", want: []string{"read"}},
		{name: "empty string", scope: "", want: []string{}},
		{name: "array", scope: []string{"route", "read"}, want: []string{"route", "read"}},
		{name: "empty array", scope: []string{}, want: []string{}},
		{name: "unknown kept", scope: "openid read", want: []string{"openid", "read"}},
		{name: "absent", scope: nil, want: nil},
		{name: "number", scope: 3, wantErr: true},
		{name: "object", scope: map[string]any{"read": true}, wantErr: true},
		{name: "array with a number", scope: []any{"read", 1}, wantErr: true},
		{name: "boolean", scope: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := v.Verify(sign(t, jwt.SigningMethodHS256, testSecret, goodClaims(tt.scope)))
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidToken) {
					t.Fatalf("err = %v, want ErrInvalidToken", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if got := c.Scopes; !slices.Equal(got, tt.want) {
				t.Errorf("Scopes = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestVerifyClaims(t *testing.T) {
	v := mustVerifier(t, hsConfig())
	got, err := v.Verify(sign(t, jwt.SigningMethodHS256, testSecret, goodClaims("read")))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	want := Claims{
		Subject:   "trainer-1",
		Scopes:    []string{"read"},
		ID:        "11111111-2222-3333-4444-555555555555",
		ExpiresAt: testNow.Add(time.Hour),
	}
	if got.Subject != want.Subject || !slices.Equal(got.Scopes, want.Scopes) || got.ID != want.ID || !got.ExpiresAt.Equal(want.ExpiresAt) {
		t.Errorf("Verify = %+v, want %+v", got, want)
	}
}

func TestLeeway(t *testing.T) {
	expiredBy := func(d time.Duration) string {
		c := goodClaims("read")
		c["exp"] = testNow.Add(-d).Unix()
		return sign(t, jwt.SigningMethodHS256, testSecret, c)
	}
	tests := []struct {
		name    string
		leeway  time.Duration
		tok     string
		wantErr bool
	}{
		{"default 30s covers 20s", 0, expiredBy(20 * time.Second), false},
		{"default 30s not 40s", 0, expiredBy(40 * time.Second), true},
		{"1s not 20s", time.Second, expiredBy(20 * time.Second), true},
		{"2m covers 90s", 2 * time.Minute, expiredBy(90 * time.Second), false},
		// At the edges: accepted while now is before exp + leeway.
		{"default covers 29s", 0, expiredBy(29 * time.Second), false},
		{"default not 30s", 0, expiredBy(DefaultLeeway), true},
		{"default not 31s", 0, expiredBy(31 * time.Second), true},
		{"none: 1s before exp", NoLeeway, expiredBy(-time.Second), false},
		{"none: not at exp", NoLeeway, expiredBy(0), true},
		{"none: not 1s past exp", NoLeeway, expiredBy(time.Second), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := hsConfig()
			cfg.Leeway = tt.leeway
			_, err := mustVerifier(t, cfg).Verify(tt.tok)
			if got := err != nil; got != tt.wantErr {
				t.Errorf("err = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

// TestVerifyErrorsDoNotLeak verifies bad tokens, logs the errors the way a
// server would, and checks that neither the error nor the log holds the
// token, any of its segments or the secret.
func TestVerifyErrorsDoNotLeak(t *testing.T) {
	k := testKeys(t)
	hs := mustVerifier(t, hsConfig())
	rs := mustVerifier(t, rsConfig(t))
	marker := "LEAKMARKERLEAKMARKER"
	withAlg := func(alg string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, goodClaims("read"))
		tok.Header["alg"] = alg
		s, err := tok.SigningString()
		if err != nil {
			t.Fatal(err)
		}
		return s + ".c2lnbmF0dXJl"
	}
	expired := goodClaims("read")
	expired["exp"] = testNow.Add(-time.Hour).Unix()
	tests := []struct {
		name string
		v    *Verifier
		tok  string
	}{
		{"garbage", hs, "this-is-not-a-token-" + marker},
		{"unknown alg", hs, withAlg(marker)},
		{"refused alg", hs, withAlg("HS512")},
		{"JSON syntax error", hs, "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.TEVBS01BUktFUkxFQUtNQVJLRVI.c2ln"},
		{"wrong secret", hs, sign(t, jwt.SigningMethodHS256, []byte(marker+marker), goodClaims("read"))},
		{"expired", hs, sign(t, jwt.SigningMethodHS256, testSecret, expired)},
		{"HS/RS confusion", rs, sign(t, jwt.SigningMethodHS256, k.rsaPKIXPub, goodClaims("read"))},
		{"secret in the token", hs, sign(t, jwt.SigningMethodHS256, []byte(marker+marker), goodClaims(string(testSecret)))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.v.Verify(tt.tok)
			if !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("err = %v, want ErrInvalidToken", err)
			}
			var log bytes.Buffer
			slog.New(slog.NewTextHandler(&log, nil)).Warn("auth failed", "err", err)
			for _, out := range []string{err.Error(), log.String()} {
				forbidden := append([]string{tt.tok, string(testSecret), marker, "LEAKMARKER"}, strings.Split(tt.tok, ".")...)
				for _, f := range forbidden {
					if len(f) >= 4 && strings.Contains(out, f) {
						t.Errorf("%q contains %q", out, f)
					}
				}
			}
		})
	}
}

// TestVerifyConcurrent runs Verify from many goroutines; with -race it
// checks the Verifier is safe for concurrent use.
func TestVerifyConcurrent(t *testing.T) {
	v := mustVerifier(t, edConfig(t))
	good := mint(t, edConfig(t), "c", ScopeRoute)
	i := len(good) - 10 // inside the signature
	flip := byte('A')
	if good[i] == flip {
		flip = 'B'
	}
	bad := good[:i] + string(flip) + good[i+1:]
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if _, err := v.Verify(good); err != nil {
					t.Errorf("Verify good: %v", err)
					return
				}
				if _, err := v.Verify(bad); err == nil {
					t.Error("Verify accepted a corrupted token")
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestIsCompactJWS(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"a.b.c", true},
		{"aZ09-_.b.c", true},
		{"", false},
		{"a.b", false},
		{"a.b.", false},
		{".b.c", false},
		{"a..c", false},
		{"a.b.c.d", false},
		{"a.b.c=", false},
		{"a.b.c\n", false},
		{"a.b+/.c", false},
		{"a b.c.d", false},
	}
	for _, tt := range tests {
		if got := isCompactJWS(tt.in); got != tt.want {
			t.Errorf("isCompactJWS(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestClaimsHasAndContext(t *testing.T) {
	c := Claims{Subject: "s", Scopes: []string{ScopeAdmin}}
	tests := []struct {
		scope string
		want  bool
	}{
		{ScopeAdmin, true},
		{ScopeRoute, false}, // no implication
		{ScopeRead, false},
		{"", false},
	}
	for _, tt := range tests {
		if got := c.Has(tt.scope); got != tt.want {
			t.Errorf("Has(%q) = %v, want %v", tt.scope, got, tt.want)
		}
	}
	if _, ok := FromContext(t.Context()); ok {
		t.Error("FromContext on a bare context: ok, want not ok")
	}
	got, ok := FromContext(NewContext(t.Context(), c))
	if !ok || got.Subject != "s" {
		t.Errorf("FromContext(NewContext) = %+v, %v; want subject s, true", got, ok)
	}
}

func TestScopes(t *testing.T) {
	for _, s := range Scopes() {
		if !IsScope(s) {
			t.Errorf("IsScope(%q) = false", s)
		}
	}
	for _, s := range []string{"", "Admin", "write", "admin "} {
		if IsScope(s) {
			t.Errorf("IsScope(%q) = true", s)
		}
	}
}

// respellings returns other spellings of tok's signature that a lax base64
// decoder reads as the same bytes: different unused trailing bits, line
// breaks inside, padding.
func respellings(tok string) map[string]string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, tok[len(tok)-1])
	mid := strings.LastIndexByte(tok, '.') + 5
	return map[string]string{
		"trailing bits":     tok[:len(tok)-1] + string(alphabet[last^1]),
		"LF in signature":   tok[:mid] + "\n" + tok[mid:],
		"CRLF in signature": tok[:mid] + "\r\n" + tok[mid:],
		"padding":           tok + "=",
		"padding x2":        tok + "==",
		"trailing LF":       tok + "\n",
	}
}

// TestVerifyRefusesOtherSpellings checks that a signature has one accepted
// spelling: a captured token cannot be altered into a different string
// that still verifies (which would defeat deny lists keyed on the token).
func TestVerifyRefusesOtherSpellings(t *testing.T) {
	for _, cfg := range []Config{hsConfig(), rsConfig(t), edConfig(t)} {
		v := mustVerifier(t, cfg)
		tok := mint(t, cfg, "s", ScopeRead)
		if _, err := v.Verify(tok); err != nil {
			t.Fatalf("%s: Verify the original: %v", v.Algorithm(), err)
		}
		for name, bad := range respellings(tok) {
			t.Run(v.Algorithm()+"/"+name, func(t *testing.T) {
				if _, err := v.Verify(bad); !errors.Is(err, ErrInvalidToken) {
					t.Errorf("Verify(%q) err = %v, want ErrInvalidToken", bad, err)
				}
			})
		}
	}
}
