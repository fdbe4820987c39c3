// Package testpki makes certificate authorities and certificates for tests,
// so that no key file is committed: a CA signs server certificates (for
// 127.0.0.1, ::1 and localhost) and client certificates, and writes them as
// the PEM files the router's flags name.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// Pair is a certificate signed by a CA, with its key.
type Pair struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA returns a new self-signed CA named name, valid for a day.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(tb),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	return &CA{Cert: sign(tb, tmpl, tmpl, key, key), key: key}
}

// Server returns a server certificate for 127.0.0.1, ::1 and localhost,
// with common name cn (tests tell two certificates apart by it).
func (ca *CA) Server(tb testing.TB, cn string) Pair {
	tb.Helper()
	return ca.issue(tb, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// Client returns a client certificate with common name cn.
func (ca *CA) Client(tb testing.TB, cn string) Pair {
	tb.Helper()
	return ca.issue(tb, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (ca *CA) issue(tb testing.TB, tmpl *x509.Certificate) Pair {
	tb.Helper()
	key := newKey(tb)
	tmpl.SerialNumber = serial(tb)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	return Pair{Cert: sign(tb, tmpl, ca.Cert, key, ca.key), Key: key}
}

// Pool returns a pool holding the CA's certificate alone.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}

// WriteCert writes the CA's certificate as PEM to dir/name and returns the
// path.
func (ca *CA) WriteCert(tb testing.TB, dir, name string) string {
	tb.Helper()
	path := filepath.Join(dir, name)
	writeFile(tb, path, certPEM(ca.Cert))
	return path
}

// Write writes the pair as PEM to dir/name.crt and dir/name.key (replacing
// them atomically, as a certificate manager does) and returns the paths.
func (p Pair) Write(tb testing.TB, dir, name string) (certFile, keyFile string) {
	tb.Helper()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	der, err := x509.MarshalECPrivateKey(p.Key)
	if err != nil {
		tb.Fatal(err)
	}
	writeFile(tb, keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	writeFile(tb, certFile, certPEM(p.Cert))
	return certFile, keyFile
}

// TLS returns the pair as a tls.Certificate.
func (p Pair) TLS() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{p.Cert.Raw}, PrivateKey: p.Key, Leaf: p.Cert}
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func writeFile(tb testing.TB, path string, data []byte) {
	tb.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatal(err)
	}
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return key
}

func serial(tb testing.TB) *big.Int {
	tb.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

func sign(tb testing.TB, tmpl, parent *x509.Certificate, key, parentKey *ecdsa.PrivateKey) *x509.Certificate {
	tb.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// IdlePolicy starts an https:// policy server that answers /idle with
// {"idle": true}, under a certificate ca signed for "policy", and that
// requires a client certificate clientCA signed. It closes when the test
// ends.
func IdlePolicy(tb testing.TB, ca, clientCA *CA) *httptest.Server {
	tb.Helper()
	policy := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"idle": true}`)
	}))
	policy.TLS = &tls.Config{
		Certificates: []tls.Certificate{ca.Server(tb, "policy").TLS()},
		ClientCAs:    clientCA.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
	policy.StartTLS()
	tb.Cleanup(policy.Close)
	return policy
}
