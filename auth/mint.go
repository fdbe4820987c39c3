package auth

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

// Mint signs a token for subject carrying scopes, valid for ttl from
// cfg.Now. It signs with exactly one of cfg.Secret (HS256) and
// cfg.PrivateKeyPEM (RS256 for an RSA key in PKCS #1 or PKCS #8, EdDSA for
// an Ed25519 key in PKCS #8). The token has sub, scope (space-separated),
// iat, nbf, exp, a random jti, and iss and aud when cfg names them.
//
// subject must be non-empty, ttl positive, and scopes a non-empty list of
// known scopes (duplicates are dropped). Errors never quote the key.
func Mint(cfg Config, subject string, scopes []string, ttl time.Duration) (string, error) {
	if subject == "" {
		return "", errors.New("auth: mint: subject is empty")
	}
	if ttl <= 0 {
		return "", fmt.Errorf("auth: mint: ttl %v is not positive", ttl)
	}
	if len(scopes) == 0 {
		return "", errors.New("auth: mint: no scopes; give one or more of admin, route, read")
	}
	var list scopeList
	for _, s := range scopes {
		if !IsScope(s) {
			return "", fmt.Errorf("auth: mint: unknown scope %q; known are admin, route, read", s)
		}
		if !slices.Contains(list, s) {
			list = append(list, s)
		}
	}

	hasSecret, hasPrivate := len(cfg.Secret) > 0, len(cfg.PrivateKeyPEM) > 0
	var (
		key any
		alg string
	)
	switch {
	case hasSecret && hasPrivate:
		return "", errors.New("auth: mint: both Secret and PrivateKeyPEM are set; give exactly one")
	case hasSecret:
		if err := checkSecret(cfg.Secret); err != nil {
			return "", err
		}
		key, alg = cfg.Secret, AlgHS256
	case hasPrivate:
		var err error
		if key, alg, err = parsePrivateKey(cfg.PrivateKeyPEM); err != nil {
			return "", err
		}
	default:
		return "", errors.New("auth: mint: neither Secret nor PrivateKeyPEM is set; give exactly one")
	}

	now := cfg.now().Truncate(time.Second)
	claims := tokenClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    cfg.Issuer,
			Subject:   subject,
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
			NotBefore: jwt.NewNumericDate(now),
			IssuedAt:  jwt.NewNumericDate(now),
			ID:        uuid.NewString(),
		},
		Scope: list,
	}
	if cfg.Audience != "" {
		claims.Audience = jwt.ClaimStrings{cfg.Audience}
	}
	signed, err := jwt.NewWithClaims(signingMethod(alg), claims).SignedString(key)
	if err != nil {
		return "", fmt.Errorf("auth: mint: sign %s token: %w", alg, err)
	}
	return signed, nil
}
