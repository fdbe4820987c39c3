// Package etcdtest runs an embedded, single-member etcd server on loopback
// ports for tests: the real engine the etcd store and leader election run
// against, with no external process.
package etcdtest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
)

// Server is a running embedded etcd.
type Server struct {
	etcd     *embed.Etcd
	cfg      *embed.Config
	dir      string
	Endpoint string // the client URL, http://127.0.0.1:<port>
}

// TLS makes a server serve its clients over HTTPS and require a client
// certificate: PEM files of its certificate and key, and of the CA that
// signs client certificates.
type TLS struct {
	CertFile, KeyFile, ClientCAFile string
}

// Start starts a server (see StartServer) and stops it when tb ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return StartTLS(tb, nil)
}

// StartTLS is Start, over TLS with client certificates when tc is set.
func StartTLS(tb testing.TB, tc *TLS) *Server {
	tb.Helper()
	s, err := startServer(tc)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// StartServer starts an etcd server with its data in a new temporary
// directory, removed by Stop. It is for a TestMain that shares one server
// between a package's tests; Start is for one test.
func StartServer() (*Server, error) { return startServer(nil) }

func startServer(tc *TLS) (*Server, error) {
	dir, err := os.MkdirTemp("", "policyrouter-etcd-")
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "policyrouter-test"
	cfg.Dir = dir
	cfg.LogLevel = "fatal" // its shutdown logs errors for closed listeners
	client, err := freeURL()
	if err != nil {
		return nil, err
	}
	peer, err := freeURL()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		client.Scheme = "https"
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: tc.CertFile, KeyFile: tc.KeyFile, TrustedCAFile: tc.ClientCAFile, ClientCertAuth: true}
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	s := &Server{cfg: cfg, dir: dir, Endpoint: client.String()}
	if err := s.start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// start starts the server on its configuration and waits until it serves.
func (s *Server) start() error {
	e, err := embed.StartEtcd(s.cfg)
	if err != nil {
		return fmt.Errorf("start embedded etcd: %w", err)
	}
	s.etcd = e
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case <-time.After(30 * time.Second):
		e.Close()
		s.etcd = nil
		return errors.New("embedded etcd not ready within 30s")
	}
}

// Restart stops the server, keeping its data, stays down for down, and
// starts it again on the same ports and data, as an operator's restart
// or a crash and recovery would. It returns the time the server was
// started again (before it was ready), from which a client's recovery is
// measured.
func (s *Server) Restart(down time.Duration) (time.Time, error) {
	if s.etcd == nil {
		return time.Time{}, errors.New("etcdtest: restart of a stopped server")
	}
	s.etcd.Close()
	s.etcd = nil
	time.Sleep(down)
	started := time.Now()
	return started, s.start()
}

// Stop stops the server and removes its data; later calls do nothing.
func (s *Server) Stop() {
	if s.etcd != nil {
		s.etcd.Close()
		s.etcd = nil
		_ = os.RemoveAll(s.dir)
	}
}

// IgnoreLeaks are the goleak options for what a stopped embedded server
// leaves running.
func IgnoreLeaks() []goleak.Option {
	return []goleak.Option{}
}

// freeURL returns an http URL on a loopback port that was free a moment
// ago.
func freeURL() (url.URL, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, fmt.Errorf("find a free port: %w", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return url.URL{Scheme: "http", Host: addr}, nil
}
