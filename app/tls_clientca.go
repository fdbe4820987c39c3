package app

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"os"
	"sync"
	"time"
)

// clientCAs is the pool of --tls-client-ca, read again when the file's
// content changes (checked at most once per certCheckEvery, at a
// handshake), so that a CA added or rotated is trusted without a restart,
// like the certificate and key. A file that does not parse (half written,
// no certificate in it) or cannot be read is logged once and the old pool
// kept; it is tried again at the next check.
type clientCAs struct {
	file string
	log  *slog.Logger
	now  func() time.Time
	base *tls.Config // the listener's configuration, whose ClientCAs is replaced

	mu         sync.Mutex
	pem        []byte      // the content the served pool was read from
	served     *tls.Config // base with the current pool
	checked    time.Time
	failed     []byte // the content that last failed to parse, logged once
	unreadable bool   // the last check could not read the file, logged once
}

// loadClientCAs reads file once (an error here stops the start-up) and
// returns the reloader of base's client CAs.
func loadClientCAs(file string, base *tls.Config, log *slog.Logger) (*clientCAs, error) {
	c := &clientCAs{file: file, log: log, now: time.Now, base: base}
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool, err := certPoolOf(file, pem, false)
	if err != nil {
		return nil, err
	}
	c.use(pem, pool)
	c.checked = c.now()
	return c, nil
}

// use serves pool, read from pem. Each pool gets session ticket keys of
// its own, so that a session a client certificate opened under the old
// CAs is not resumed under the new ones. Caller must hold mu (or own c).
func (c *clientCAs) use(pem []byte, pool *x509.CertPool) {
	tc := c.base.Clone()
	tc.ClientCAs = pool
	tc.GetConfigForClient = nil
	var key [32]byte
	_, _ = rand.Read(key[:]) // never fails (crypto/rand)
	tc.SetSessionTicketKeys([][32]byte{key})
	c.pem, c.served = pem, tc
}

// config returns the configuration of a handshake: base with the current
// client CAs, reloaded first when the file has changed. It is the
// listener's tls.Config.GetConfigForClient.
func (c *clientCAs) config(*tls.ClientHelloInfo) (*tls.Config, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if now.Sub(c.checked) < certCheckEvery {
		return c.served, nil
	}
	c.checked = now
	pem, err := os.ReadFile(c.file)
	if err != nil {
		if !c.unreadable {
			c.unreadable = true
			c.log.Error("client CA file unreadable: trusting the loaded client CAs", "tls_client_ca", c.file, "err", err)
		}
		return c.served, nil
	}
	c.unreadable = false
	if bytes.Equal(pem, c.pem) || bytes.Equal(pem, c.failed) {
		return c.served, nil
	}
	pool, err := certPoolOf(c.file, pem, false)
	if err != nil {
		c.failed = pem
		c.log.Error("new client CA file does not load: trusting the old client CAs", "tls_client_ca", c.file, "err", err)
		return c.served, nil
	}
	c.use(pem, pool)
	c.failed = nil
	c.log.Info("client CAs reloaded", "tls_client_ca", c.file)
	return c.served, nil
}
