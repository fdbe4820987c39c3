package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The load generator is wrk's loop in Go: each connection sends the same
// request bytes, reads the answer's head and body, and sends again. It
// parses only what HTTP/1.1 framing needs, so that its own CPU (on the
// same cores as the proxy) stays small next to a net/http client's.

// load drives a fixed number of keep-alive connections until stopped,
// counting the answers.
type load struct {
	ok     atomic.Int64 // 200 answers
	failed atomic.Int64 // other answers and connection errors
	first  atomic.Pointer[string]
	// measuring is set over the measured window, when the answers'
	// latencies go into latency.
	measuring atomic.Bool
	latency   histogram
	// seq numbers the requests of a unique workload.
	seq atomic.Int64

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startLoad opens conns connections, connection i to bases[i % len(bases)]
// (host:port), each sending POST wl.path with wl.body in a loop.
func startLoad(bases []string, conns int, wl workload) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel}
	for i := range conns {
		addr := bases[i%len(bases)]
		head := "POST " + wl.path + " HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: " +
			strconv.Itoa(len(wl.body)) + "\r\n\r\n"
		req := []byte(head + wl.body)
		vary := -1 // where the digits to rewrite start
		if wl.unique {
			vary = len(head) + len(uniqueIDsFirst) - uniqueDigits - 1
		}
		l.wg.Go(func() { l.drive(ctx, addr, req, vary) })
	}
	return l
}

// number writes the next request number into req's uniqueDigits digits
// from at.
func (l *load) number(req []byte, at int) {
	n := 1_000_000 + l.seq.Add(1)%9_000_000
	strconv.AppendInt(req[at:at], n, 10)
}

// stop ends the load and waits for its connections to close.
func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

// fail counts a failure and keeps the first for the report.
func (l *load) fail(err error) {
	l.failed.Add(1)
	msg := err.Error()
	l.first.CompareAndSwap(nil, &msg)
}

// drive runs one connection's loop until ctx ends, reconnecting after a
// closed or failed connection; vary >= 0 numbers each request there.
func (l *load) drive(ctx context.Context, addr string, req []byte, vary int) {
	for ctx.Err() == nil {
		conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", addr)
		if err != nil {
			if ctx.Err() == nil {
				l.fail(err)
				time.Sleep(10 * time.Millisecond) // do not spin on a refused connection
			}
			continue
		}
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		rd := bufio.NewReaderSize(conn, 16<<10)
		for ctx.Err() == nil {
			if vary >= 0 {
				l.number(req, vary)
			}
			sent := time.Now()
			if _, err := conn.Write(req); err != nil {
				break
			}
			status, keep, err := readResponse(rd)
			if err == nil && l.measuring.Load() {
				l.latency.add(time.Since(sent))
			}
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, io.EOF) {
					l.fail(err)
				}
				break
			}
			if status == 200 {
				l.ok.Add(1)
			} else {
				l.fail(fmt.Errorf("status %d", status))
			}
			if !keep {
				break
			}
		}
		stop()
		conn.Close()
	}
}

// readResponse reads one HTTP/1.1 answer (head, then a body framed by
// Content-Length or chunked) and returns its status and whether the
// connection stays open.
func readResponse(rd *bufio.Reader) (status int, keep bool, err error) {
	line, err := rd.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	// "HTTP/1.1 200 OK"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	length, chunked, keep := int64(-1), false, true
	for {
		line, err := rd.ReadSlice('\n')
		if err != nil {
			return 0, false, err
		}
		h := strings.TrimRight(string(line), "\r\n")
		if h == "" {
			break
		}
		k, v, _ := strings.Cut(h, ":")
		v = strings.TrimSpace(v)
		switch {
		case strings.EqualFold(k, "Content-Length"):
			if length, err = strconv.ParseInt(v, 10, 64); err != nil {
				return 0, false, fmt.Errorf("bad Content-Length %q", v)
			}
		case strings.EqualFold(k, "Transfer-Encoding"):
			chunked = strings.EqualFold(v, "chunked")
		case strings.EqualFold(k, "Connection"):
			keep = !strings.EqualFold(v, "close")
		}
	}
	switch {
	case chunked:
		err = discardChunked(rd)
	case length >= 0:
		_, err = rd.Discard(int(length))
	default: // the body lasts until the connection closes
		_, err = io.Copy(io.Discard, rd)
		keep = false
	}
	return status, keep, err
}

// discardChunked reads a chunked body to its end, trailers included.
func discardChunked(rd *bufio.Reader) error {
	for {
		line, err := rd.ReadSlice('\n')
		if err != nil {
			return err
		}
		size, _, _ := strings.Cut(strings.TrimSpace(string(line)), ";")
		n, err := strconv.ParseInt(size, 16, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("bad chunk size %q", line)
		}
		if n == 0 {
			for { // trailers, then the empty line
				line, err := rd.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return nil
				}
			}
		}
		if _, err := rd.Discard(int(n) + 2); err != nil { // the data and its CRLF
			return err
		}
	}
}

// histogram counts latencies in buckets 2% wide from 1 µs to about 10 s:
// a quantile read from it is within 2% of the true one.
type histogram struct{ buckets [histBuckets]atomic.Int64 }

const (
	histBase    = 1.02
	histBuckets = 820 // 1.02^820 µs: about 11 s
)

func (h *histogram) add(d time.Duration) {
	us := float64(d) / float64(time.Microsecond)
	i := 0
	if us > 1 {
		i = min(int(math.Log(us)/math.Log(histBase)), histBuckets-1)
	}
	h.buckets[i].Add(1)
}

// quantile returns the latency below which a fraction q of the counted
// ones fall (the upper edge of its bucket); 0 when none was counted.
func (h *histogram) quantile(q float64) time.Duration {
	var total int64
	for i := range h.buckets {
		total += h.buckets[i].Load()
	}
	if total == 0 {
		return 0
	}
	want, seen := int64(math.Ceil(q*float64(total))), int64(0)
	for i := range h.buckets {
		if seen += h.buckets[i].Load(); seen >= want {
			return time.Duration(math.Pow(histBase, float64(i+1)) * float64(time.Microsecond))
		}
	}
	return 0
}
