package app

import (
	"sync"
	"time"

	"github.com/policyrouter/policyrouter/auth"
	"github.com/policyrouter/policyrouter/handlers"
)

// Every replica on an etcd store proxies generate traffic: a follower
// leases each attempt from the leader (handlers.ReplicaConfig), over the
// --peer-* TLS settings, with a token of its own. The replicas share their
// token key; with a shared secret (--jwt-secret) a replica mints its token
// itself. With a public key (--jwt-public-key) it holds nothing to sign
// with, and a follower answers generate traffic not_leader, as the other
// routing endpoints.

// replicaTokenTTL is the lifetime of a replica's token; it mints a new one
// when half of it has passed.
const replicaTokenTTL = 10 * time.Minute

// replicaSubject is the subject of a replica's token.
const replicaSubject = "policyrouter-replica"

// replicaConfig returns how this replica proxies as a follower, or nil
// when it cannot authenticate to the leader.
func (a *App) replicaConfig() *handlers.ReplicaConfig {
	cfg := a.Config
	rc := &handlers.ReplicaConfig{Holder: func() string { return a.Config.AdvertiseURL }}
	switch {
	case cfg.JWTSecret != "":
		m := &tokenMinter{cfg: auth.Config{Secret: []byte(cfg.JWTSecret), Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience}}
		rc.Token = m.token
	case cfg.Auth != nil:
		cfg.Logger.Info("followers answer generate traffic not_leader: with a public token key (--jwt-public-key), a replica cannot mint its token for the leader")
		return nil
	}
	return rc
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
