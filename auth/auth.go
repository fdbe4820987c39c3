// Package auth authenticates policyrouter's callers with JWT bearer tokens
// and authorises them by scope.
//
// A Verifier checks a token's signature with one key whose type pins the
// algorithm (HS256 for a shared secret, RS256 for an RSA public key, EdDSA
// for an Ed25519 public key; every other "alg", including "none", is
// refused), requires "exp", and checks "iss" and "aud" when configured.
// Middleware puts the verified Claims in the request context and answers
// 401 or 403 with an RFC 6750 WWW-Authenticate challenge. Mint issues
// tokens for the `policyrouter token` command and for tests.
//
// Scopes are independent: "admin" does not imply "route" or "read", and
// "route" does not imply "read". A token meant for everything carries all
// three. Keeping the rule explicit means a route gets exactly the scope it
// names and nothing is granted by a hidden hierarchy.
//
// Errors and challenges never contain the token, its parts or the key
// material; they carry a short fixed description of what was wrong.
package auth

import (
	"context"
	"errors"
	"slices"
	"time"
)

// Scopes a token may carry. Each route of the API requires exactly one.
const (
	// ScopeAdmin allows registration, deletion, topology and drain/resume.
	ScopeAdmin = "admin"
	// ScopeRoute allows /assign, /select, /release and /complete.
	ScopeRoute = "route"
	// ScopeRead allows /stats, /metrics and the GET endpoints.
	ScopeRead = "read"
)

// Scopes lists the known scopes in a fixed order.
func Scopes() []string { return []string{ScopeAdmin, ScopeRoute, ScopeRead} }

// IsScope reports whether s is one of the known scopes.
func IsScope(s string) bool {
	return s == ScopeAdmin || s == ScopeRoute || s == ScopeRead
}

// Realm is the realm named in WWW-Authenticate challenges.
const Realm = "policyrouter"

// DefaultLeeway is the clock skew allowed on exp, nbf and iat when
// Config.Leeway is zero: a token is accepted until 30 s after its exp.
const DefaultLeeway = 30 * time.Second

// NoLeeway is the Config.Leeway that allows no clock skew at all: a token
// is refused from its exp on. (Zero means DefaultLeeway.)
const NoLeeway time.Duration = -1

// ErrInvalidToken is wrapped by every error Verify returns for a token that
// is not accepted; the rest of the message says why in a few fixed words.
var ErrInvalidToken = errors.New("invalid token")

// Claims are the verified facts of a token.
type Claims struct {
	// Subject is the "sub" claim; it may be empty for tokens not minted
	// by Mint.
	Subject string
	// Scopes are the scopes the token carries, in token order. Unknown
	// scopes are kept as given and simply match no route.
	Scopes []string
	// ID is the "jti" claim, if any.
	ID string
	// ExpiresAt is the "exp" claim.
	ExpiresAt time.Time
}

// Has reports whether the claims carry scope. There is no implication
// between scopes: Has(ScopeRead) is false for a token with only "admin".
func (c Claims) Has(scope string) bool {
	return slices.Contains(c.Scopes, scope)
}

// ctxKey is the context key of the verified claims.
type ctxKey struct{}

// NewContext returns a copy of ctx carrying c, as Middleware does for a
// verified request. Tests of handlers use it to fake an authenticated call.
func NewContext(ctx context.Context, c Claims) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// FromContext returns the claims Middleware verified for the request whose
// context is ctx. ok is false when the request was not authenticated (open
// mode, or a route without Middleware).
func FromContext(ctx context.Context) (c Claims, ok bool) {
	c, ok = ctx.Value(ctxKey{}).(Claims)
	return c, ok
}
