package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// MaxTokenLen is the longest token Verify reads, in bytes. Real tokens are
// a few hundred bytes; anything longer is refused before decoding.
const MaxTokenLen = 8 << 10

// Config holds the keys and checks of token verification and minting.
type Config struct {
	// Secret is the HS256 shared secret, at least MinSecretLen bytes.
	Secret []byte
	// PublicKeyPEM verifies RS256 (RSA, PKIX "PUBLIC KEY" or PKCS #1 "RSA
	// PUBLIC KEY") or EdDSA (Ed25519, PKIX) tokens. Exactly one of Secret
	// and PublicKeyPEM is needed by NewVerifier.
	PublicKeyPEM []byte
	// PrivateKeyPEM signs RS256 (RSA, PKCS #1 or PKCS #8) or EdDSA
	// (Ed25519, PKCS #8) tokens in Mint. NewVerifier ignores it.
	PrivateKeyPEM []byte
	// Issuer, when set, is written to "iss" by Mint and required in "iss"
	// by the Verifier.
	Issuer string
	// Audience, when set, is written to "aud" by Mint and required among
	// "aud" by the Verifier.
	Audience string
	// Leeway is the clock skew allowed on exp, nbf and iat: a token is
	// accepted while now is before exp + Leeway. Zero means DefaultLeeway,
	// NoLeeway none; any other negative value is refused.
	Leeway time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (c Config) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Verifier checks bearer tokens against one key. It is safe for concurrent
// use.
type Verifier struct {
	alg    string
	key    any
	parser *jwt.Parser
}

// NewVerifier returns a Verifier for cfg. Exactly one of cfg.Secret (HS256)
// and cfg.PublicKeyPEM (RS256 or EdDSA, by key type) must be set. The key
// type pins the algorithm: tokens with any other "alg", "none" included,
// are refused. Tokens must carry "exp"; "iss" and "aud" are checked when
// cfg names them; "nbf" and "iat", when present, may not be in the future
// beyond the leeway.
//
// Errors describe the configuration problem and never quote the secret.
func NewVerifier(cfg Config) (*Verifier, error) {
	hasSecret, hasPublic := len(cfg.Secret) > 0, len(cfg.PublicKeyPEM) > 0
	if hasSecret && hasPublic {
		return nil, errors.New("auth: both Secret and PublicKeyPEM are set; give exactly one")
	}
	if !hasSecret && !hasPublic {
		return nil, errors.New("auth: neither Secret nor PublicKeyPEM is set; give exactly one")
	}
	if cfg.Leeway < 0 && cfg.Leeway != NoLeeway {
		return nil, fmt.Errorf("auth: leeway %v is negative", cfg.Leeway)
	}
	v := &Verifier{}
	if hasSecret {
		if err := checkSecret(cfg.Secret); err != nil {
			return nil, err
		}
		// A copy, so that the caller reusing its slice changes nothing.
		v.key, v.alg = append([]byte(nil), cfg.Secret...), AlgHS256
	} else {
		key, alg, err := parsePublicKey(cfg.PublicKeyPEM)
		if err != nil {
			return nil, err
		}
		v.key, v.alg = key, alg
	}
	leeway := cfg.Leeway
	switch leeway {
	case 0:
		leeway = DefaultLeeway
	case NoLeeway:
		leeway = 0
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{v.alg}),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(leeway),
		jwt.WithTimeFunc(now),
		// Trailing bits of a base64 segment must be zero, so that one
		// signature has one spelling.
		jwt.WithStrictDecoding(),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// Algorithm returns the one algorithm the Verifier accepts: AlgHS256,
// AlgRS256 or AlgEdDSA.
func (v *Verifier) Algorithm() string { return v.alg }

// Verify checks tokenString (the compact JWS, without "Bearer ") and returns
// its claims. Every refusal wraps ErrInvalidToken with a short fixed reason
// such as "token is expired"; the error never contains the token or key.
// A valid token without a scope claim verifies with no scopes.
func (v *Verifier) Verify(tokenString string) (Claims, error) {
	c, why := v.verify(tokenString)
	if why != "" {
		return Claims{}, fmt.Errorf("%w: %s", ErrInvalidToken, why)
	}
	return c, nil
}

// verify is Verify with the refusal as a fixed reason; "" means accepted.
func (v *Verifier) verify(tokenString string) (Claims, string) {
	if len(tokenString) > MaxTokenLen {
		return Claims{}, "token is too long"
	}
	if !isCompactJWS(tokenString) {
		return Claims{}, "token is malformed"
	}
	var tc tokenClaims
	if _, err := v.parser.ParseWithClaims(tokenString, &tc, v.keyFunc); err != nil {
		return Claims{}, reason(err)
	}
	c := Claims{
		Subject: tc.Subject,
		Scopes:  []string(tc.Scope),
		ID:      tc.ID,
	}
	if tc.ExpiresAt != nil {
		c.ExpiresAt = tc.ExpiresAt.Time
	}
	return c, ""
}

// keyFunc hands the parser the Verifier's key. The parser has already
// refused any other algorithm; the check is repeated here so that the key
// is never given to a method it was not meant for.
func (v *Verifier) keyFunc(t *jwt.Token) (any, error) {
	if t.Method == nil || t.Method.Alg() != v.alg {
		return nil, errors.New("unexpected signing method")
	}
	return v.key, nil
}

// isCompactJWS reports whether s is three non-empty base64url segments
// joined by dots. Refusing anything else up front keeps characters the
// base64 decoder would skip (CR, LF) or the padding it would accept out of
// the signature, so a signature has exactly one accepted spelling.
func isCompactJWS(s string) bool {
	dots := 0
	segLen := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.':
			if segLen == 0 {
				return false
			}
			dots++
			segLen = 0
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
			segLen++
		default:
			return false
		}
	}
	return dots == 2 && segLen > 0
}

// reason maps a jwt error to a fixed description. jwt's own messages may
// quote parts of the token (an unknown "alg", a JSON syntax error), so they
// are never passed on.
func reason(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "token is malformed"
	case errors.Is(err, jwt.ErrTokenUnverifiable), errors.Is(err, jwt.ErrTokenSignatureInvalid):
		// An unknown or refused "alg" lands here too; the answer does not
		// say which, and does not echo the token's header.
		return "signature is invalid or algorithm not accepted"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "token is expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "token is not valid yet"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "token is issued in the future"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "token is missing a required claim (exp, iss or aud)"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "token has the wrong issuer"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "token has the wrong audience"
	default:
		return "token is not valid"
	}
}

// tokenClaims is the JSON form of a token's claims.
type tokenClaims struct {
	jwt.RegisteredClaims
	Scope scopeList `json:"scope,omitempty"`
}

// scopeList is the "scope" claim: written as one space-separated string
// (RFC 8693 §4.2, OAuth style), read from that or from a JSON array of
// strings.
type scopeList []string

// MarshalJSON writes the OAuth form, "a b c".
func (s scopeList) MarshalJSON() ([]byte, error) {
	return json.Marshal(strings.Join(s, " "))
}

// UnmarshalJSON reads "a b c" or ["a", "b", "c"]; null means no scopes.
// Any other JSON type makes the token malformed.
func (s *scopeList) UnmarshalJSON(data []byte) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	switch v := v.(type) {
	case nil:
		*s = nil
	case string:
		*s = strings.Fields(v)
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			str, ok := e.(string)
			if !ok {
				return errors.New("scope array holds a non-string")
			}
			out = append(out, str)
		}
		*s = out
	default:
		return errors.New("scope is neither a string nor an array of strings")
	}
	return nil
}
