package app

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/policyrouter/policyrouter/auth"
	"github.com/policyrouter/policyrouter/handlers"
)

// Every replica on an etcd store proxies generate traffic: a follower
// leases each attempt from the leader (handlers.ReplicaConfig), over the
// --peer-* TLS settings, with a token (scope route) of its own. Where the
// token comes from:
//
//   - --replica-token-file: a token the operator minted (with the private
//     key of --jwt-public-key, or the --jwt-secret), read again when the
//     file changes, so that a rotated token is presented without a
//     restart. With --jwt-secret too, the file wins.
//   - --jwt-secret: the replica mints its token itself.
//   - --jwt-public-key alone: the replica holds nothing to sign with, and a
//     follower answers generate traffic not_leader, as the other routing
//     endpoints.

// replicaTokenTTL is the lifetime of a replica's token; it mints a new one
// when half of it has passed.
const replicaTokenTTL = 10 * time.Minute

// replicaSubject is the subject of a replica's token.
const replicaSubject = "policyrouter-replica"

// replicaTokenRecheck is how long a token read from --replica-token-file
// is presented before the file is read again: a rotated token is in use
// within that long. A file that could not be read is read again at the
// next call.
const replicaTokenRecheck = time.Second

// replicaConfig returns how this replica proxies as a follower, or nil
// when it cannot authenticate to the leader. It reads --replica-token-file
// once, and fails when that gives no token.
func (a *App) replicaConfig() (*handlers.ReplicaConfig, error) {
	cfg := a.Config
	rc := &handlers.ReplicaConfig{Holder: func() string { return a.Config.AdvertiseURL }}
	switch {
	case cfg.ReplicaTokenFile != "":
		f := &tokenFile{path: cfg.ReplicaTokenFile, verifier: cfg.Auth, logger: cfg.Logger, recheck: replicaTokenRecheck}
		if _, err := f.token(); err != nil {
			return nil, err
		}
		if cfg.JWTSecret != "" {
			cfg.Logger.Info("replica token: a follower presents the token of --replica-token-file to the leader; it does not mint one from --jwt-secret",
				"path", cfg.ReplicaTokenFile)
		}
		rc.Token, rc.TokenSource = f.token, "--replica-token-file "+cfg.ReplicaTokenFile
	case cfg.JWTSecret != "":
		m := &tokenMinter{cfg: auth.Config{Secret: []byte(cfg.JWTSecret), Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience}}
		rc.Token, rc.TokenSource = m.token, "minted from --jwt-secret"
	case cfg.Auth != nil:
		cfg.Logger.Info("followers answer generate traffic not_leader: with a public token key (--jwt-public-key), a replica cannot mint its token for the leader; " +
			"give it one minted with the private key (scope route) with --replica-token-file")
		return nil, nil
	}
	return rc, nil
}

// tokenMinter mints a replica's token and keeps it for half its life.
type tokenMinter struct {
	cfg   auth.Config
	mu    sync.Mutex
	tok   string
	renew time.Time
}

func (m *tokenMinter) token() (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if m.tok != "" && now.Before(m.renew) {
		return m.tok, nil
	}
	tok, err := auth.Mint(m.cfg, replicaSubject, []string{auth.ScopeRoute}, replicaTokenTTL)
	if err != nil {
		return "", err
	}
	m.tok, m.renew = tok, now.Add(replicaTokenTTL/2)
	return tok, nil
}

// tokenFile presents the token held in a file (--replica-token-file),
// read again at most every recheck while it reads well, and at every call
// while it does not, so that a token rotated by rewriting the file is
// presented within recheck, without a restart. The file holds the token
// alone; surrounding white space is dropped.
type tokenFile struct {
	path string
	// verifier, when set, checks each new token as the leader will, so
	// that the log says why the leader is going to refuse it; the token is
	// presented all the same (the leader decides).
	verifier *auth.Verifier
	logger   *slog.Logger
	recheck  time.Duration

	mu   sync.Mutex
	tok  string    // the last token read; "" after a failed read
	read time.Time // when tok was read
}

func (f *tokenFile) token() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if f.tok != "" && now.Sub(f.read) < f.recheck {
		return f.tok, nil
	}
	tok, err := readTokenFile(f.path)
	if err != nil {
		f.tok = ""
		return "", fmt.Errorf("--replica-token-file: %w", err)
	}
	if tok != f.tok {
		f.check(tok)
	}
	f.tok, f.read = tok, now
	return tok, nil
}

// check logs a token newly read: what it is, or why the leader will
// refuse it. It never logs the token.
func (f *tokenFile) check(tok string) {
	if f.verifier == nil {
		f.logger.Info("replica token: read", "path", f.path)
		return
	}
	c, err := f.verifier.Verify(tok)
	switch {
	case err != nil:
		f.logger.Warn("replica token: the token of --replica-token-file does not verify with this replica's key; the leader will refuse it",
			"path", f.path, "err", err)
	case !c.Has(auth.ScopeRoute):
		f.logger.Warn("replica token: the token of --replica-token-file lacks scope route; the leader will refuse it",
			"path", f.path, "scopes", c.Scopes)
	default:
		f.logger.Info("replica token: read", "path", f.path, "subject", c.Subject, "expires", c.ExpiresAt)
	}
}

// readTokenFile reads the token a file holds: the whole file, but for
// surrounding white space, which must be one bearer token.
func readTokenFile(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	// Room for the longest token the leader accepts and its line ending.
	b, err := io.ReadAll(io.LimitReader(fh, auth.MaxTokenLen+64))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case tok == "":
		return "", fmt.Errorf("%s is empty; it must hold a token (scope route) minted for the replicas", path)
	case len(tok) > auth.MaxTokenLen:
		return "", fmt.Errorf("%s holds more than a token (over %d bytes)", path, auth.MaxTokenLen)
	case strings.IndexFunc(tok, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0:
		return "", errors.New(path + " holds more than a token: white space or other characters inside it")
	}
	return tok, nil
}
