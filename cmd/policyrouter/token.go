package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/policyrouter/policyrouter/auth"
)

// tokenCommand mints a bearer token from the configured secret or private
// key and prints it, so curl users need no other tool:
//
//	export TOKEN=$(policyrouter token --scope route,read --ttl 24h)
func tokenCommand(args []string) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	var (
		secret, privateKey, issuer, audience, scope, subject string
		ttl                                                  time.Duration
	)
	fs.StringVar(&secret, "jwt-secret", "", "HS256 secret (the server's --jwt-secret)")
	fs.StringVar(&privateKey, "jwt-private-key", "", "PEM file of the RSA or Ed25519 private key matching the server's --jwt-public-key")
	fs.StringVar(&issuer, "jwt-issuer", "", "iss claim (the server's --jwt-issuer)")
	fs.StringVar(&audience, "jwt-audience", "", "aud claim (the server's --jwt-audience)")
	fs.StringVar(&scope, "scope", auth.ScopeRoute, "scopes, comma or space separated: admin, route, read")
	fs.StringVar(&subject, "subject", "policyrouter-cli", "sub claim: who the token is for")
	fs.DurationVar(&ttl, "ttl", 24*time.Hour, "how long the token is valid")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg := auth.Config{Issuer: issuer, Audience: audience}
	switch {
	case secret != "" && privateKey != "":
		return errors.New("give --jwt-secret or --jwt-private-key, not both")
	case secret != "":
		cfg.Secret = []byte(secret)
	case privateKey != "":
		pem, err := os.ReadFile(privateKey)
		if err != nil {
			return fmt.Errorf("--jwt-private-key: %w", err)
		}
		cfg.PrivateKeyPEM = pem
	default:
		return errors.New("no key: set --jwt-secret (or POLICYROUTER_JWT_SECRET) or --jwt-private-key")
	}
	scopes := strings.FieldsFunc(scope, func(r rune) bool { return r == ',' || r == ' ' })
	tok, err := auth.Mint(cfg, subject, scopes, ttl)
	if err != nil {
		return err
	}
	fmt.Println(tok)
	return nil
}
