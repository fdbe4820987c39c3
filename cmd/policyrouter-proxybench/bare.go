package main

import (
	"context"
	"errors"
	"flag"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// The bare side is the least a Go proxy built on net/http does: one
// httputil.ReverseProxy, round robin over the policies, keep-alive
// connections, no routing, leases, logging or metrics. Its CPU per
// request is the floor of any proxy that keeps ReverseProxy and
// http.Transport.

// startBare runs the bare proxy as a child on a free loopback port and
// returns it with its base URL.
func startBare(ctx context.Context, dir string, policies []string) (*child, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(self, "-addr", addr, "-policies", strings.Join(policies, ","))
	cmd.Env = append(os.Environ(), childEnv+"=bare")
	c, err := startChild("bare", dir, cmd)
	if err != nil {
		return nil, "", err
	}
	base := "http://" + addr
	if err := c.waitHTTP(ctx, base+"/idle"); err != nil {
		c.stop()
		return nil, "", err
	}
	return c, base, nil
}

// serveBare is the bare proxy's child: -addr and -policies (a comma
// list of base URLs), until SIGTERM.
func serveBare(args []string) error {
	fs := flag.NewFlagSet("bare", flag.ContinueOnError)
	addr := fs.String("addr", "", "listen address")
	list := fs.String("policies", "", "comma list of the policies' base URLs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var targets []*url.URL
	for _, s := range strings.Split(*list, ",") {
		u, err := url.Parse(s)
		if err != nil {
			return err
		}
		targets = append(targets, u)
	}
	if *addr == "" || len(targets) == 0 {
		return errors.New("bare: -addr and -policies are required")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost, tr.DisableCompression = 0, 256, true
	var next atomic.Uint64
	rp := &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(targets[next.Add(1)%uint64(len(targets))])
		},
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
