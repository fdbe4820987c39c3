package benchkit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

// RequestTimeout bounds one request of NewClient's client.
const RequestTimeout = 10 * time.Second

// NewClient returns the load client: keep-alive, HTTP/1.1, no proxy, with
// as many idle connections per host as client goroutines.
func NewClient(concurrency int) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        0, // no limit over all hosts
			MaxIdleConnsPerHost: concurrency,
			IdleConnTimeout:     2 * time.Minute,
			DisableCompression:  true,
			ForceAttemptHTTP2:   false,
		},
		Timeout: RequestTimeout,
	}
}

// SleepUntil sleeps until t or ctx's end, and reports whether t came.
func SleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// ParseList parses the comma list s of flag -name: names of known, in the
// order given, each once. An unknown name is an error that lists known.
func ParseList(name, noun, s string, known []string) ([]string, error) {
	var out []string
	for n := range strings.SplitSeq(s, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "" || slices.Contains(out, n):
		case !slices.Contains(known, n):
			return nil, fmt.Errorf("-%s: unknown %s %q (have %s)", name, noun, n, strings.Join(known, ", "))
		default:
			out = append(out, n)
		}
	}
	return out, nil
}

// Main runs a measuring command: run with the command line, stdout and
// stderr, cancelled on SIGINT or SIGTERM. An error is printed after the
// command's name (but not -h's, whose usage the flags printed) and exits 2.
func Main(name string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, name+":", err)
		}
		os.Exit(2)
	}
}
