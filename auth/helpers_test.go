package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/policyrouter/policyrouter/api"
)

// Fixed values of the tests: a clock, an issuer and an audience.
var (
	testNow      = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	testIssuer   = "https://issuer.test"
	testAudience = "policyrouter"
	testSecret   = []byte("0123456789abcdef0123456789abcdef-test-secret")
)

func fixedNow() time.Time { return testNow }

// keySet holds keys generated once per test binary.
type keySet struct {
	rsa         *rsa.PrivateKey
	rsaPKIXPub  []byte // "PUBLIC KEY"
	rsaPKCS1Pub []byte // "RSA PUBLIC KEY"
	rsaPKCS1    []byte // "RSA PRIVATE KEY"
	rsaPKCS8    []byte // "PRIVATE KEY"

	ed        ed25519.PrivateKey
	edPKIXPub []byte
	edPKCS8   []byte

	otherRSA     *rsa.PrivateKey // a key the verifiers do not know
	otherEd      ed25519.PrivateKey
	smallRSAPub  []byte // 1024 bits
	smallRSAPriv []byte
	ecdsaPub     []byte
	ecdsaPriv    []byte
}

var (
	keysOnce sync.Once
	keys     *keySet
	keysErr  error
)

func testKeys(tb testing.TB) *keySet {
	tb.Helper()
	keysOnce.Do(func() { keys, keysErr = generateKeys() })
	if keysErr != nil {
		tb.Fatalf("generate keys: %v", keysErr)
	}
	return keys
}

func generateKeys() (*keySet, error) {
	var k keySet
	var err error
	// The main keys are fixed, so that every fuzz worker process verifies
	// the seed corpus with the same keys: a test-only RSA key in testdata
	// and an Ed25519 key from a constant seed.
	data, err := os.ReadFile("testdata/rsa2048.pem")
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("testdata/rsa2048.pem: no PEM block")
	}
	priv, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	var ok bool
	if k.rsa, ok = priv.(*rsa.PrivateKey); !ok {
		return nil, fmt.Errorf("testdata/rsa2048.pem holds a %T", priv)
	}
	k.ed = ed25519.NewKeyFromSeed([]byte("policyrouter auth test ed25519 k"))
	edPub := k.ed.Public().(ed25519.PublicKey)
	if k.otherRSA, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		return nil, err
	}
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		return nil, err
	}
	if _, k.otherEd, err = ed25519.GenerateKey(rand.Reader); err != nil {
		return nil, err
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}

	pkix := func(pub any) ([]byte, error) {
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			return nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
	}
	pkcs8 := func(priv any) ([]byte, error) {
		der, err := x509.MarshalPKCS8PrivateKey(priv)
		if err != nil {
			return nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
	}
	if k.rsaPKIXPub, err = pkix(&k.rsa.PublicKey); err != nil {
		return nil, err
	}
	k.rsaPKCS1Pub = pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&k.rsa.PublicKey)})
	k.rsaPKCS1 = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k.rsa)})
	if k.rsaPKCS8, err = pkcs8(k.rsa); err != nil {
		return nil, err
	}
	if k.edPKIXPub, err = pkix(edPub); err != nil {
		return nil, err
	}
	if k.edPKCS8, err = pkcs8(k.ed); err != nil {
		return nil, err
	}
	if k.smallRSAPub, err = pkix(&small.PublicKey); err != nil {
		return nil, err
	}
	if k.smallRSAPriv, err = pkcs8(small); err != nil {
		return nil, err
	}
	if k.ecdsaPub, err = pkix(&ec.PublicKey); err != nil {
		return nil, err
	}
	if k.ecdsaPriv, err = pkcs8(ec); err != nil {
		return nil, err
	}
	return &k, nil
}

// The three configurations of the tests, one per algorithm, all with
// issuer and audience checks and the fixed clock.
func hsConfig() Config {
	return Config{Secret: testSecret, Issuer: testIssuer, Audience: testAudience, Now: fixedNow}
}

func rsConfig(tb testing.TB) Config {
	k := testKeys(tb)
	return Config{PublicKeyPEM: k.rsaPKIXPub, PrivateKeyPEM: k.rsaPKCS8, Issuer: testIssuer, Audience: testAudience, Now: fixedNow}
}

func edConfig(tb testing.TB) Config {
	k := testKeys(tb)
	return Config{PublicKeyPEM: k.edPKIXPub, PrivateKeyPEM: k.edPKCS8, Issuer: testIssuer, Audience: testAudience, Now: fixedNow}
}

func mustVerifier(tb testing.TB, cfg Config) *Verifier {
	tb.Helper()
	v, err := NewVerifier(cfg)
	if err != nil {
		tb.Fatalf("NewVerifier: %v", err)
	}
	return v
}

// goodClaims returns claims every test verifier accepts, with scope; edit
// the map to build an attack.
func goodClaims(scope any) jwt.MapClaims {
	c := jwt.MapClaims{
		"iss": testIssuer,
		"aud": testAudience,
		"sub": "trainer-1",
		"iat": testNow.Unix(),
		"nbf": testNow.Unix(),
		"exp": testNow.Add(time.Hour).Unix(),
		"jti": "11111111-2222-3333-4444-555555555555",
	}
	if scope != nil {
		c["scope"] = scope
	}
	return c
}

// sign signs claims with method and key, bypassing Mint.
func sign(tb testing.TB, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	tb.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		tb.Fatalf("sign %s: %v", method.Alg(), err)
	}
	return s
}

// mint is Mint that fails the test on error.
func mint(tb testing.TB, cfg Config, subject string, scopes ...string) string {
	tb.Helper()
	s, err := Mint(cfg, subject, scopes, time.Hour)
	if err != nil {
		tb.Fatalf("Mint: %v", err)
	}
	return s
}

// envelopeWriter is the onError of the tests: it writes the API's error
// envelope, as the handlers package does.
func envelopeWriter(w http.ResponseWriter, _ *http.Request, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.ErrorResponse{Error: api.ErrorBody{Code: code, Message: message, RequestID: "test"}})
}
