package app

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certCheckEvery is how often, at most, a keyPair reads its files again:
// handshakes cost two small reads at most once per period.
const certCheckEvery = time.Second

// keyPair is a certificate and its key, read from two PEM files and read
// again when either file's content changes, so that a renewed certificate
// is served without a restart. A new pair that does not load (half
// written, or a key that does not match) is logged once and the old one
// kept; the files are tried again at the next check.
type keyPair struct {
	certFile, keyFile string
	log               *slog.Logger
	now               func() time.Time

	mu         sync.Mutex
	cert       *tls.Certificate
	certPEM    []byte // the files the loaded pair was read from
	keyPEM     []byte
	checked    time.Time
	failedCert []byte // the files that last failed to load, logged once
	failedKey  []byte
	unreadable bool // the last check could not read the files, logged once
}

// loadKeyPair reads the pair once: an error here stops the start-up.
func loadKeyPair(certFile, keyFile string, log *slog.Logger) (*keyPair, error) {
	kp := &keyPair{certFile: certFile, keyFile: keyFile, log: log, now: time.Now}
	certPEM, keyPEM, err := kp.read()
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	kp.cert, kp.certPEM, kp.keyPEM, kp.checked = &cert, certPEM, keyPEM, kp.now()
	return kp, nil
}

func (kp *keyPair) read() (certPEM, keyPEM []byte, err error) {
	if certPEM, err = os.ReadFile(kp.certFile); err != nil {
		return nil, nil, err
	}
	if keyPEM, err = os.ReadFile(kp.keyFile); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// current returns the pair to present, reloading it first when the files
// have changed since it was loaded.
func (kp *keyPair) current() *tls.Certificate {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	now := kp.now()
	if now.Sub(kp.checked) < certCheckEvery {
		return kp.cert
	}
	kp.checked = now
	certPEM, keyPEM, err := kp.read()
	if err != nil {
		if !kp.unreadable {
			kp.unreadable = true
			kp.log.Error("certificate files unreadable: serving the loaded certificate", "cert", kp.certFile, "key", kp.keyFile, "err", err)
		}
		return kp.cert
	}
	kp.unreadable = false
	if (bytes.Equal(certPEM, kp.certPEM) && bytes.Equal(keyPEM, kp.keyPEM)) ||
		(bytes.Equal(certPEM, kp.failedCert) && bytes.Equal(keyPEM, kp.failedKey)) {
		return kp.cert
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		kp.failedCert, kp.failedKey = certPEM, keyPEM
		kp.log.Error("new certificate does not load: serving the old one", "cert", kp.certFile, "key", kp.keyFile, "err", err)
		return kp.cert
	}
	kp.cert, kp.certPEM, kp.keyPEM = &cert, certPEM, keyPEM
	kp.failedCert, kp.failedKey = nil, nil
	kp.log.Info("certificate reloaded", "cert", kp.certFile, "subject", cert.Leaf.Subject.String(), "not_after", cert.Leaf.NotAfter)
	return kp.cert
}

// serverTLS returns the TLS configuration of the router's listener, or nil
// when cfg serves plain HTTP: TLS 1.2 at least, the certificate reloaded
// when its files change, HTTP/2 offered, and, with a client CA, client
// certificates required and verified (the CA file reloaded when it
// changes, tls_clientca.go). Validate has checked that the
// settings go together.
func serverTLS(cfg Config) (*tls.Config, error) {
	if cfg.TLSCert == "" {
		return nil, nil
	}
	kp, err := loadKeyPair(cfg.TLSCert, cfg.TLSKey, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	tc := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return kp.current(), nil
		},
	}
	if cfg.TLSClientCA != "" {
		tc.ClientAuth = tls.RequireAndVerifyClientCert
		cas, err := loadClientCAs(cfg.TLSClientCA, tc, cfg.Logger)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		// Every handshake gets the configuration with the current CAs.
		tc.ClientCAs = cas.served.ClientCAs
		tc.GetConfigForClient = cas.config
	}
	return tc, nil
}

// policyTLS returns the TLS configuration of the probes of https://
// policies, or nil for the defaults: the system's roots plus --policy-ca,
// and a client certificate (reloaded like the server's) for policies that
// require one.
func policyTLS(cfg Config) (*tls.Config, error) {
	return clientTLS(cfg.Logger, clientFiles{"--policy-ca", cfg.PolicyCA}, clientFiles{"--policy-client-cert", cfg.PolicyClientCert}, clientFiles{"--policy-client-key", cfg.PolicyClientKey})
}

// peerTLS returns the TLS configuration of a follower's requests to the
// leader, or nil for the defaults: --peer-ca trusted besides the system's
// roots, and the client certificate of a leader that requires one.
func peerTLS(cfg Config) (*tls.Config, error) {
	return clientTLS(cfg.Logger, clientFiles{"--peer-ca", cfg.PeerCA}, clientFiles{"--peer-cert", cfg.PeerCert}, clientFiles{"--peer-key", cfg.PeerKey})
}

// etcdTLS returns the TLS configuration towards etcd, or nil for plain
// connections: --etcd-ca trusted besides the system's roots, and the
// client certificate of a cluster that requires one.
func etcdTLS(cfg Config) (*tls.Config, error) {
	return clientTLS(cfg.Logger, clientFiles{"--etcd-ca", cfg.EtcdCA}, clientFiles{"--etcd-cert", cfg.EtcdCert}, clientFiles{"--etcd-key", cfg.EtcdKey})
}

// clientFiles is a PEM file of a client's TLS settings and the flag that
// named it.
type clientFiles struct{ flag, file string }

// clientTLS returns the TLS configuration of a client that trusts ca
// besides the system's roots and presents cert and key (reloaded when
// they change), or nil when all three are empty. Validate has checked that
// cert and key go together.
func clientTLS(log *slog.Logger, ca, cert, key clientFiles) (*tls.Config, error) {
	if ca.file == "" && cert.file == "" && key.file == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca.file != "" {
		pool, err := certPool(ca.file, true)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ca.flag, err)
		}
		tc.RootCAs = pool
	}
	if cert.file != "" {
		kp, err := loadKeyPair(cert.file, key.file, log)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", cert.flag, key.flag, err)
		}
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return kp.current(), nil
		}
	}
	return tc, nil
}

// certPool reads the PEM certificates of file into a pool: the system's
// roots and those when withSystem, else those alone.
func certPool(file string, withSystem bool) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return certPoolOf(file, pem, withSystem)
}

// certPoolOf is certPool of file's content pem.
func certPoolOf(file string, pem []byte, withSystem bool) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if withSystem {
		if sys, err := x509.SystemCertPool(); err == nil {
			pool = sys
		}
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", file)
	}
	return pool, nil
}
