package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"text/tabwriter"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/client"
	"github.com/policyrouter/policyrouter/routing"
)

// errAttention is the status command's answer when the router needs a
// person: exit status 1, after the table. The errors below wrap it;
// statusCommand returns those that apply, joined.
var errAttention = errors.New("the router needs attention")

var (
	// errUnhealthy: a policy is unhealthy (its /idle fails).
	errUnhealthy = fmt.Errorf("a policy is unhealthy: %w", errAttention)
	// errUpdateFailed: a rolling update failed a policy and left it
	// drained (state update_failed) until an operator resumes it.
	errUpdateFailed = fmt.Errorf("a rolling update failed a policy: %w", errAttention)
	// errFloorUnmet: policies can route but none meets the weight-version
	// floor, so all routing waits.
	errFloorUnmet = fmt.Errorf("no policy that can route meets the weight-version floor: %w", errAttention)
)

// statusCommand prints the policies of a running router from its /stats,
// one line each, and the weight-version floor, and returns errAttention
// (wrapped) when a policy is unhealthy or failed by an update or the floor
// is unmet, so that scripts and probes can use its exit status.
func statusCommand(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var (
		url, token, ca, cert, key string
		timeout                   time.Duration
	)
	fs.StringVar(&url, "url", "http://127.0.0.1:8080", "the router's base URL (https:// for a router serving TLS)")
	fs.StringVar(&token, "token", "", "bearer token with scope read, when the router has a token key")
	fs.StringVar(&ca, "ca", "", "PEM file of CA certificates trusted, besides the system's, for the router's certificate")
	fs.StringVar(&cert, "cert", "", "PEM file of a client certificate, for a router that requires one (--tls-client-ca)")
	fs.StringVar(&key, "key", "", "PEM file of the key of --cert")
	fs.DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the router")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	hc, err := httpsClient(ca, cert, key)
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := client.New(url, hc)
	c.Token = token
	stats, err := c.Stats(ctx)
	if err != nil {
		return statusHint(err, url)
	}
	if err := printStatus(out, stats); err != nil {
		return err
	}
	return statusVerdict(stats)
}

// statusVerdict returns what in s needs a person, as the errors above
// joined, or nil.
func statusVerdict(s api.Stats) error {
	var errs []error
	if max(s.Totals.Unhealthy, countState(s, routing.StateUnhealthy)) > 0 {
		errs = append(errs, errUnhealthy)
	}
	if max(s.Totals.UpdateFailed, countState(s, api.StateUpdateFailed)) > 0 {
		errs = append(errs, errUpdateFailed)
	}
	if s.Floor != nil && !s.Floor.Met {
		errs = append(errs, errFloorUnmet)
	}
	return errors.Join(errs...)
}

// countState counts the policies of s in state: the totals of a router
// that does not count a state are not trusted to.
func countState(s api.Stats, state string) int {
	n := 0
	for _, p := range s.Policies {
		if p.State == state {
			n++
		}
	}
	return n
}

// reason says why a policy does not route, or its last probe error: an
// update_failed policy's update error, a paused or asleep engine's state.
func reason(p api.PolicyStats) string {
	switch p.State {
	case api.StateUpdateFailed:
		return "update failed: " + valueOr(p.UpdateError, "no error recorded")
	case routing.StatePaused:
		return "engine paused (generation paused outside an update); routed again once it resumes"
	case routing.StateAsleep:
		return "engine asleep (memory released); routed again once woken (POST /fleet/wake)"
	}
	return valueOr(p.LastError, "-")
}

// httpsClient returns a client that trusts the system's roots and the
// certificates of the PEM file ca, and presents the client certificate
// cert with its key when given.
func httpsClient(ca, cert, key string) (*http.Client, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca: %s: no PEM certificate", ca)
		}
		tc.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return nil, errors.New("--cert and --key go together")
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("--cert/--key: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	tr.ForceAttemptHTTP2 = true
	return &http.Client{Transport: tr}, nil
}

// floorLine describes the weight-version floor of s in one line.
func floorLine(s api.Stats) string {
	f := s.Floor
	switch {
	case s.MinVersion == 0:
		return "weight floor: none"
	case f == nil: // a router without the floor object
		return fmt.Sprintf("weight floor: %d", s.MinVersion)
	case f.Routable == 0:
		return fmt.Sprintf("weight floor: %d; no policy can route", s.MinVersion)
	case !f.Met:
		return fmt.Sprintf("weight floor: %d UNMET: none of the %d policies that can route has reached it (highest version %d); "+
			"all routing waits: update the policies, or lower the floor with PUT /weights", s.MinVersion, f.Routable, f.HighestVersion)
	}
	return fmt.Sprintf("weight floor: %d, met by %d of the %d policies that can route (highest version %d)",
		s.MinVersion, f.Meeting, f.Routable, f.HighestVersion)
}

// printStatus writes one line per policy, then the totals and the
// weight-version floor.
func printStatus(w io.Writer, s api.Stats) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tNODE\tENGINE\tSTATE\tVERSION\tLOAD\tIN FLIGHT\tREASON / LAST ERROR")
	for _, p := range s.Policies {
		node := p.NodeID
		if node == "" {
			node = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d/%d\t%s\n", p.Index, node, valueOr(p.Engine, "-"), p.State, p.Version, p.Load,
			p.Inflight, p.Capacity, reason(p))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	t := s.Totals
	failed := ""
	for _, c := range []struct {
		state string
		n     int
	}{
		{api.StateUpdateFailed, max(t.UpdateFailed, countState(s, api.StateUpdateFailed))},
		{routing.StatePaused, max(t.Paused, countState(s, routing.StatePaused))},
		{routing.StateAsleep, max(t.Asleep, countState(s, routing.StateAsleep))},
	} {
		if c.n > 0 {
			failed += fmt.Sprintf(", %d %s", c.n, c.state)
		}
	}
	_, err := fmt.Fprintf(w, "%d policies: %d idle, %d busy, %d unhealthy, %d draining, %d unknown%s; %d waiters, %d leases\n",
		t.Policies, t.Idle, t.Busy, t.Unhealthy, t.Draining, t.Unknown, failed, s.Waiters, s.Leases)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(w, floorLine(s)); err != nil || s.Replica == nil {
		return err
	}
	switch {
	case s.Replica.Leading:
		_, err = fmt.Fprintln(w, "replica: the leader (it routes and polls)")
	case s.Replica.StatsFrom != "":
		_, err = fmt.Fprintf(w, "replica: a follower, showing the policies as the leader %s sees them\n", s.Replica.StatsFrom)
	case s.Replica.Leader != "":
		_, err = fmt.Fprintf(w, "replica: a follower that could not reach the leader (it does not poll: policies show unknown); the leader is %s\n", s.Replica.Leader)
	default:
		_, err = fmt.Fprintln(w, "replica: a follower; no leader is elected")
	}
	return err
}
