package auth

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/policyrouter/policyrouter/api"
)

const (
	challengeMissing = `Bearer realm="policyrouter"`
	challengeScope   = `Bearer realm="policyrouter", error="insufficient_scope", scope="route"`
)

func challengeInvalid(desc string) string {
	return `Bearer realm="policyrouter", error="invalid_token", error_description="` + desc + `"`
}

// okHandler answers 200 with the subject of the verified claims.
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	c, ok := FromContext(r.Context())
	if !ok {
		http.Error(w, "no claims in context", http.StatusTeapot)
		return
	}
	_, _ = w.Write([]byte(c.Subject))
})

// serve runs one request with the given Authorization headers through
// Middleware(v, scope).
func serve(tb testing.TB, v *Verifier, scope string, authz ...string) *httptest.ResponseRecorder {
	tb.Helper()
	req := httptest.NewRequest(http.MethodPost, "/assign", nil)
	for _, a := range authz {
		req.Header.Add("Authorization", a)
	}
	rec := httptest.NewRecorder()
	Middleware(v, scope, envelopeWriter)(okHandler).ServeHTTP(rec, req)
	return rec
}

// TestMiddlewareAttacks sends forged, stale and misdirected tokens through
// the middleware of a route that needs "route", and the good tokens of each
// algorithm. Each refusal must have the right status, challenge and
// envelope code, and must not echo the token.
func TestMiddlewareAttacks(t *testing.T) {
	k := testKeys(t)
	hs := mustVerifier(t, hsConfig())
	rs := mustVerifier(t, rsConfig(t))
	ed := mustVerifier(t, edConfig(t))
	rsPKCS1 := mustVerifier(t, Config{PublicKeyPEM: k.rsaPKCS1Pub, Issuer: testIssuer, Audience: testAudience, Now: fixedNow})
	noAud := mustVerifier(t, Config{Secret: testSecret, Now: fixedNow})
	noLeeway := hsConfig()
	noLeeway.Leeway = NoLeeway
	strict := mustVerifier(t, noLeeway)

	with := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		c := goodClaims("route")
		edit(c)
		return c
	}
	hsSign := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, testSecret, c) }
	none := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, goodClaims("route"))
	good := hsSign(goodClaims("route"))
	parts := strings.Split(good, ".")

	tests := []struct {
		name      string
		v         *Verifier
		authz     []string // Authorization header values
		wantCode  int
		wantChall string
		wantSub   string // on success
	}{
		// Missing or not bearer credentials.
		{name: "no token", v: hs, wantCode: 401, wantChall: challengeMissing},
		{name: "empty header", v: hs, authz: []string{""}, wantCode: 401, wantChall: challengeMissing},
		{name: "basic scheme", v: hs, authz: []string{"Basic dXNlcjpwYXNz"}, wantCode: 401, wantChall: challengeMissing},
		{name: "token without scheme", v: hs, authz: []string{good}, wantCode: 401, wantChall: challengeMissing},

		// Malformed.
		{name: "bearer without token", v: hs, authz: []string{"Bearer"}, wantCode: 401, wantChall: challengeInvalid("malformed Authorization header")},
		{name: "bearer with blank token", v: hs, authz: []string{"Bearer   "}, wantCode: 401, wantChall: challengeInvalid("malformed Authorization header")},
		{name: "two tokens in one header", v: hs, authz: []string{"Bearer " + good + " " + good}, wantCode: 401, wantChall: challengeInvalid("malformed Authorization header")},
		{name: "two Authorization headers", v: hs, authz: []string{"Bearer " + good, "Bearer " + good}, wantCode: 401, wantChall: challengeInvalid("malformed Authorization header")},
		{name: "not a JWT", v: hs, authz: []string{"Bearer not-a-jwt"}, wantCode: 401, wantChall: challengeInvalid("token is malformed")},
		{name: "four segments", v: hs, authz: []string{"Bearer " + good + ".x"}, wantCode: 401, wantChall: challengeInvalid("token is malformed")},
		{name: "header not JSON", v: hs, authz: []string{"Bearer bm90anNvbg." + parts[1] + "." + parts[2]}, wantCode: 401, wantChall: challengeInvalid("token is malformed")},
		{name: "padded segment", v: hs, authz: []string{"Bearer " + good + "="}, wantCode: 401, wantChall: challengeInvalid("token is malformed")},
		{name: "too long", v: hs, authz: []string{"Bearer " + strings.Repeat("a", MaxTokenLen) + ".b.c"}, wantCode: 401, wantChall: challengeInvalid("token is too long")},

		// Forged signatures and algorithm attacks.
		{name: "wrong signature", v: hs, authz: []string{"Bearer " + sign(t, jwt.SigningMethodHS256, []byte("another-secret-of-at-least-32-bytes!"), goodClaims("route"))},
			wantCode: 401, wantChall: challengeInvalid("signature is invalid or algorithm not accepted")},
		{name: "payload swapped", v: hs, authz: []string{"Bearer " + parts[0] + "." + strings.Split(hsSign(goodClaims("route admin read")), ".")[1] + "." + parts[2]},
			wantCode: 401, wantChall: challengeInvalid("signature is invalid or algorithm not accepted")},
		{name: "signature stripped", v: hs, authz: []string{"Bearer " + parts[0] + "." + parts[1] + "."}, wantCode: 401, wantChall: challengeInvalid("token is malformed")},
		{name: "alg none vs HS256", v: hs, authz: []string{"Bearer " + none}, wantCode: 401, wantChall: challengeInvalid("token is malformed")},
		{name: "alg none with a signature vs RS256", v: rs, authz: []string{"Bearer " + none + "c2ln"}, wantCode: 401, wantChall: challengeInvalid("signature is invalid or algorithm not accepted")},
		{name: "HS256 signed with RSA public PEM vs RS256", v: rs, authz: []string{"Bearer " + sign(t, jwt.SigningMethodHS256, k.rsaPKIXPub, goodClaims("route"))},
			wantCode: 401, wantChall: challengeInvalid("signature is invalid or algorithm not accepted")},
		{name: "HS256 signed with Ed25519 public PEM vs EdDSA", v: ed, authz: []string{"Bearer " + sign(t, jwt.SigningMethodHS256, k.edPKIXPub, goodClaims("route"))},
			wantCode: 401, wantChall: challengeInvalid("signature is invalid or algorithm not accepted")},
		{name: "RS256 token vs HS256", v: hs, authz: []string{"Bearer " + sign(t, jwt.SigningMethodRS256, k.rsa, goodClaims("route"))},
			wantCode: 401, wantChall: challengeInvalid("signature is invalid or algorithm not accepted")},
		{name: "RS256 by another key", v: rs, authz: []string{"Bearer " + sign(t, jwt.SigningMethodRS256, k.otherRSA, goodClaims("route"))},
			wantCode: 401, wantChall: challengeInvalid("signature is invalid or algorithm not accepted")},
		{name: "PS256 by the right key vs RS256", v: rs, authz: []string{"Bearer " + sign(t, jwt.SigningMethodPS256, k.rsa, goodClaims("route"))},
			wantCode: 401, wantChall: challengeInvalid("signature is invalid or algorithm not accepted")},
		{name: "EdDSA by another key", v: ed, authz: []string{"Bearer " + sign(t, jwt.SigningMethodEdDSA, k.otherEd, goodClaims("route"))},
			wantCode: 401, wantChall: challengeInvalid("signature is invalid or algorithm not accepted")},

		// Time.
		{name: "expired", v: hs, authz: []string{"Bearer " + hsSign(with(func(c jwt.MapClaims) { c["exp"] = testNow.Add(-time.Minute).Unix() }))},
			wantCode: 401, wantChall: challengeInvalid("token is expired")},
		{name: "1s past exp without leeway", v: strict, authz: []string{"Bearer " + hsSign(with(func(c jwt.MapClaims) { c["exp"] = testNow.Add(-time.Second).Unix() }))},
			wantCode: 401, wantChall: challengeInvalid("token is expired")},
		{name: "not yet valid", v: hs, authz: []string{"Bearer " + hsSign(with(func(c jwt.MapClaims) { c["nbf"] = testNow.Add(time.Minute).Unix() }))},
			wantCode: 401, wantChall: challengeInvalid("token is not valid yet")},
		{name: "issued in the future", v: hs, authz: []string{"Bearer " + hsSign(with(func(c jwt.MapClaims) { c["iat"] = testNow.Add(time.Hour).Unix() }))},
			wantCode: 401, wantChall: challengeInvalid("token is issued in the future")},
		{name: "missing exp", v: hs, authz: []string{"Bearer " + hsSign(with(func(c jwt.MapClaims) { delete(c, "exp") }))},
			wantCode: 401, wantChall: challengeInvalid("token is missing a required claim (exp, iss or aud)")},
		{name: "exp not a number", v: hs, authz: []string{"Bearer " + hsSign(with(func(c jwt.MapClaims) { c["exp"] = "tomorrow" }))},
			wantCode: 401, wantChall: challengeInvalid("token is malformed")},

		// Issuer and audience.
		{name: "wrong audience", v: hs, authz: []string{"Bearer " + hsSign(with(func(c jwt.MapClaims) { c["aud"] = "other-service" }))},
			wantCode: 401, wantChall: challengeInvalid("token has the wrong audience")},
		{name: "missing audience", v: hs, authz: []string{"Bearer " + hsSign(with(func(c jwt.MapClaims) { delete(c, "aud") }))},
			wantCode: 401, wantChall: challengeInvalid("token is missing a required claim (exp, iss or aud)")},
		{name: "wrong issuer", v: hs, authz: []string{"Bearer " + hsSign(with(func(c jwt.MapClaims) { c["iss"] = "https://evil.test" }))},
			wantCode: 401, wantChall: challengeInvalid("token has the wrong issuer")},
		{name: "missing issuer", v: hs, authz: []string{"Bearer " + hsSign(with(func(c jwt.MapClaims) { delete(c, "iss") }))},
			wantCode: 401, wantChall: challengeInvalid("token is missing a required claim (exp, iss or aud)")},

		// Scopes.
		{name: "scope claim a number", v: hs, authz: []string{"Bearer " + hsSign(goodClaims(7))}, wantCode: 401, wantChall: challengeInvalid("token is malformed")},
		{name: "missing scope claim", v: hs, authz: []string{"Bearer " + hsSign(goodClaims(nil))}, wantCode: 403, wantChall: challengeScope},
		{name: "empty scope", v: hs, authz: []string{"Bearer " + hsSign(goodClaims(""))}, wantCode: 403, wantChall: challengeScope},
		{name: "token for another scope", v: hs, authz: []string{"Bearer " + hsSign(goodClaims("read"))}, wantCode: 403, wantChall: challengeScope},
		{name: "admin does not imply route", v: hs, authz: []string{"Bearer " + hsSign(goodClaims("admin"))}, wantCode: 403, wantChall: challengeScope},
		{name: "scope prefix", v: hs, authz: []string{"Bearer " + hsSign(goodClaims("router"))}, wantCode: 403, wantChall: challengeScope},
		{name: "scope case", v: hs, authz: []string{"Bearer " + hsSign(goodClaims("ROUTE"))}, wantCode: 403, wantChall: challengeScope},

		// Successes.
		{name: "HS256", v: hs, authz: []string{"Bearer " + mint(t, hsConfig(), "hs-user", ScopeRoute)}, wantCode: 200, wantSub: "hs-user"},
		{name: "RS256", v: rs, authz: []string{"Bearer " + mint(t, rsConfig(t), "rs-user", ScopeRoute)}, wantCode: 200, wantSub: "rs-user"},
		{name: "RS256 with a PKCS1 public key", v: rsPKCS1, authz: []string{"Bearer " + mint(t, rsConfig(t), "rs-user", ScopeRoute)}, wantCode: 200, wantSub: "rs-user"},
		{name: "EdDSA", v: ed, authz: []string{"Bearer " + mint(t, edConfig(t), "ed-user", ScopeRoute)}, wantCode: 200, wantSub: "ed-user"},
		{name: "all scopes", v: hs, authz: []string{"Bearer " + mint(t, hsConfig(), "ops", ScopeAdmin, ScopeRoute, ScopeRead)}, wantCode: 200, wantSub: "ops"},
		{name: "scope array", v: hs, authz: []string{"Bearer " + hsSign(goodClaims([]string{"read", "route"}))}, wantCode: 200, wantSub: "trainer-1"},
		{name: "unknown scope next to route", v: hs, authz: []string{"Bearer " + hsSign(goodClaims("openid route"))}, wantCode: 200, wantSub: "trainer-1"},
		{name: "lowercase scheme", v: hs, authz: []string{"bearer " + good}, wantCode: 200, wantSub: "trainer-1"},
		{name: "expired within leeway", v: hs, authz: []string{"Bearer " + hsSign(with(func(c jwt.MapClaims) { c["exp"] = testNow.Add(-10 * time.Second).Unix() }))},
			wantCode: 200, wantSub: "trainer-1"},
		{name: "no aud or iss checks configured", v: noAud, authz: []string{"Bearer " + hsSign(with(func(c jwt.MapClaims) { delete(c, "aud"); delete(c, "iss") }))},
			wantCode: 200, wantSub: "trainer-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := serve(t, tt.v, ScopeRoute, tt.authz...)
			if got := rec.Code; got != tt.wantCode {
				t.Fatalf("status = %d, want %d; body %s", got, tt.wantCode, rec.Body)
			}
			if got := rec.Header().Get("WWW-Authenticate"); got != tt.wantChall {
				t.Errorf("WWW-Authenticate = %q, want %q", got, tt.wantChall)
			}
			if tt.wantCode == http.StatusOK {
				if got := rec.Body.String(); got != tt.wantSub {
					t.Errorf("subject = %q, want %q", got, tt.wantSub)
				}
				return
			}
			var env api.ErrorResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil {
				t.Fatalf("body is not the error envelope: %v; %s", err, rec.Body)
			}
			wantCode := api.CodeUnauthorized
			if tt.wantCode == http.StatusForbidden {
				wantCode = api.CodeForbidden
			}
			if got := env.Error.Code; got != wantCode {
				t.Errorf("envelope code = %q, want %q", got, wantCode)
			}
			if env.Error.Message == "" {
				t.Error("envelope message is empty")
			}
			out := rec.Body.String() + rec.Header().Get("WWW-Authenticate")
			for _, a := range tt.authz {
				tok := strings.TrimSpace(strings.TrimPrefix(a, "Bearer"))
				if len(tok) >= 8 && strings.Contains(out, tok) {
					t.Errorf("response echoes the token: %s", out)
				}
			}
			if strings.Contains(out, string(testSecret)) {
				t.Errorf("response contains the secret: %s", out)
			}
		})
	}
}

func TestMiddlewareNilVerifierPassesThrough(t *testing.T) {
	for _, authz := range [][]string{nil, {"Bearer garbage"}} {
		called := false
		h := Middleware(nil, ScopeAdmin, envelopeWriter)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			called = true
			if _, ok := FromContext(r.Context()); ok {
				t.Error("FromContext ok in open mode, want no claims")
			}
		}))
		req := httptest.NewRequest(http.MethodGet, "/stats", nil)
		for _, a := range authz {
			req.Header.Add("Authorization", a)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if got, want := rec.Code, http.StatusOK; got != want || !called {
			t.Errorf("authz %q: status = %d, called = %v; want %d, true", authz, got, called, want)
		}
	}
}

func TestMiddlewareEmptyScopeAuthenticatesOnly(t *testing.T) {
	hs := mustVerifier(t, hsConfig())
	tests := []struct {
		name  string
		authz []string
		want  int
	}{
		{"no scope claim", []string{"Bearer " + sign(t, jwt.SigningMethodHS256, testSecret, goodClaims(nil))}, 200},
		{"no token", nil, 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := serve(t, hs, "", tt.authz...).Code; got != tt.want {
				t.Errorf("status = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestMiddlewareClaimsInContext(t *testing.T) {
	hs := mustVerifier(t, hsConfig())
	tok := mint(t, hsConfig(), "trainer-7", ScopeRead, ScopeRoute)
	var got Claims
	h := Middleware(hs, ScopeRead, envelopeWriter)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = FromContext(r.Context())
	}))
	req := httptest.NewRequest(http.MethodGet, "/stats", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	h.ServeHTTP(httptest.NewRecorder(), req)
	if got.Subject != "trainer-7" || !got.Has(ScopeRead) || !got.Has(ScopeRoute) || got.Has(ScopeAdmin) {
		t.Errorf("claims = %+v, want subject trainer-7 with read and route only", got)
	}
	if want := testNow.Add(time.Hour); !got.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt = %v, want %v", got.ExpiresAt, want)
	}
}

func TestMiddlewareDefaultErrorWriter(t *testing.T) {
	hs := mustVerifier(t, hsConfig())
	req := httptest.NewRequest(http.MethodGet, "/stats", nil)
	rec := httptest.NewRecorder()
	Middleware(hs, ScopeRead, nil)(okHandler).ServeHTTP(rec, req)
	if got, want := rec.Code, http.StatusUnauthorized; got != want {
		t.Fatalf("status = %d, want %d", got, want)
	}
	if got, want := rec.Header().Get("Content-Type"), "application/json"; got != want {
		t.Errorf("Content-Type = %q, want %q", got, want)
	}
	var env api.ErrorResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil {
		t.Fatalf("decode envelope: %v", err)
	}
	if got, want := env.Error.Code, api.CodeUnauthorized; got != want {
		t.Errorf("code = %q, want %q", got, want)
	}
}

func TestMiddlewareUnknownScopePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Middleware with an unknown scope did not panic")
		}
	}()
	Middleware(nil, "superuser", envelopeWriter)
}

func TestQuotable(t *testing.T) {
	tests := []struct{ in, want string }{
		{"token is expired", "token is expired"},
		{`a "quoted" \ value`, "a quoted  value"},
		{"line\r\nbreak\té", "linebreak"},
	}
	for _, tt := range tests {
		if got := quotable(tt.in); got != tt.want {
			t.Errorf("quotable(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
