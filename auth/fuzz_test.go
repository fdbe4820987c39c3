package auth

import (
	"crypto"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// fixedErrors are all the errors Verify may return: fixed texts that
// cannot echo the input.
var fixedErrors = map[string]bool{
	"invalid token: token is too long":                                   true,
	"invalid token: token is malformed":                                  true,
	"invalid token: signature is invalid or algorithm not accepted":      true,
	"invalid token: token is expired":                                    true,
	"invalid token: token is not valid yet":                              true,
	"invalid token: token is issued in the future":                       true,
	"invalid token: token is missing a required claim (exp, iss or aud)": true,
	"invalid token: token has the wrong issuer":                          true,
	"invalid token: token has the wrong audience":                        true,
	"invalid token: token is not valid":                                  true,
}

// FuzzVerify feeds arbitrary strings to an HS256, an RS256 and an EdDSA
// Verifier, and through Middleware. Verify must never panic, and must
// accept nothing but tokens minted with its own key: whatever it accepts
// must be "header.payload.sig" with sig exactly the base64url of the
// signature that key makes over "header.payload", recomputed here with
// crypto/hmac, crypto/rsa and crypto/ed25519 rather than with jwt (all
// three schemes are deterministic). So a mutated spelling of a real token
// (other base64 trailing bits, padding, line breaks) must be refused too.
// Tokens minted in this process must be accepted. Middleware answers only
// 200, 401 or 403.
func FuzzVerify(f *testing.F) {
	k := testKeys(f)
	type target struct {
		v     *Verifier
		valid map[string]bool // the tokens signed with v's key
	}
	targets := map[string]*target{
		AlgHS256: {v: mustVerifier(f, hsConfig()), valid: map[string]bool{}},
		AlgRS256: {v: mustVerifier(f, rsConfig(f)), valid: map[string]bool{}},
		AlgEdDSA: {v: mustVerifier(f, edConfig(f)), valid: map[string]bool{}},
	}
	keyOf := map[string]any{AlgHS256: testSecret, AlgRS256: k.rsa, AlgEdDSA: k.ed}
	cfgOf := map[string]Config{AlgHS256: hsConfig(), AlgRS256: rsConfig(f), AlgEdDSA: edConfig(f)}
	for alg, tg := range targets {
		for _, tok := range []string{
			mint(f, cfgOf[alg], "fuzz", ScopeRoute),
			mint(f, cfgOf[alg], "fuzz", ScopeAdmin, ScopeRoute, ScopeRead),
			sign(f, signingMethod(alg), keyOf[alg], goodClaims("read")),
			sign(f, signingMethod(alg), keyOf[alg], goodClaims([]string{"route"})),
			sign(f, signingMethod(alg), keyOf[alg], goodClaims(nil)),
		} {
			tg.valid[tok] = true
			f.Add(tok)
			// Near misses: every token must stay refused when mutated.
			f.Add(tok[:len(tok)-1])
			f.Add(strings.Replace(tok, ".", ".\n", 1))
			for _, bad := range respellings(tok) {
				f.Add(bad)
			}
		}
	}
	for _, s := range []string{
		"",
		"a.b.c",
		"...",
		"Bearer x",
		sign(f, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, goodClaims("route")),
		sign(f, jwt.SigningMethodHS256, k.rsaPKIXPub, goodClaims("route")),
		sign(f, jwt.SigningMethodHS256, k.edPKIXPub, goodClaims("route")),
		sign(f, jwt.SigningMethodRS256, k.otherRSA, goodClaims("route")),
		sign(f, jwt.SigningMethodPS256, k.rsa, goodClaims("route")),
		sign(f, jwt.SigningMethodHS512, testSecret, goodClaims("route")),
		"eyJhbGciOiJIUzI1NiJ9.eyJzY29wZSI6WzEsMl19.c2ln",
		"eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjFlMzA4fQ.c2ln",
	} {
		f.Add(s)
	}

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	f.Fuzz(func(t *testing.T, s string) {
		for alg, tg := range targets {
			c, err := tg.v.Verify(s)
			if err == nil && !signedWith(t, alg, keyOf[alg], s) {
				t.Fatalf("%s verifier accepted a token not signed with its key: %q (claims %+v)", alg, s, c)
			}
			if err != nil && tg.valid[s] {
				t.Fatalf("%s verifier refused its own token %q: %v", alg, s, err)
			}
			if err != nil && !fixedErrors[err.Error()] {
				t.Fatalf("error %q is not one of the fixed messages", err)
			}
		}
		req := httptest.NewRequest(http.MethodPost, "/select", nil)
		req.Header.Set("Authorization", "Bearer "+s)
		rec := httptest.NewRecorder()
		Middleware(targets[AlgHS256].v, ScopeRoute, envelopeWriter)(handler).ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusUnauthorized, http.StatusForbidden:
		default:
			t.Fatalf("Middleware status %d for %q", rec.Code, s)
		}
	})
}

// signedWith reports whether tok is exactly signingString + "." +
// base64url(signature by key over signingString) for alg.
func signedWith(tb testing.TB, alg string, key any, tok string) bool {
	tb.Helper()
	i := strings.LastIndexByte(tok, '.')
	if i < 0 {
		return false
	}
	signing := tok[:i]
	var sig []byte
	switch alg {
	case AlgHS256:
		m := hmac.New(sha256.New, key.([]byte))
		m.Write([]byte(signing))
		sig = m.Sum(nil)
	case AlgRS256:
		sum := sha256.Sum256([]byte(signing))
		var err error
		if sig, err = rsa.SignPKCS1v15(nil, key.(*rsa.PrivateKey), crypto.SHA256, sum[:]); err != nil {
			tb.Fatalf("rsa sign: %v", err)
		}
	case AlgEdDSA:
		sig = ed25519.Sign(key.(ed25519.PrivateKey), []byte(signing))
	default:
		tb.Fatalf("unknown alg %s", alg)
	}
	return tok == signing+"."+base64.RawURLEncoding.EncodeToString(sig)
}
