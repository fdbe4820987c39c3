package h1

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// response is the http.ResponseWriter of a request served here. It
// frames the answer as net/http's server does (chunkWriter.writeHeader in
// net/http/server.go): the header as it was at WriteHeader, a
// Content-Length when the handler declared one or ended before holdSize
// bytes, chunks otherwise, a sniffed Content-Type when none was set, a
// Date, and Connection: close when the connection will close.
type response struct {
	c    *conn
	req  *http.Request
	body *body // nil without one
	// reqBody is body's storage, so that the two come in one allocation.
	reqBody body
	h       http.Header

	status   int   // 0 until WriteHeader
	declared int64 // the handler's Content-Length; -1 none
	written  int64 // body bytes the handler wrote
	// What WriteHeader saw in the header, for the framing.
	te    string
	conn  string // the Connection field
	clKey bool   // a Content-Length field, valid or not
	// Where the framing fields are in c.head: writeHead leaves out those
	// net/http would delete, and sends the others where they are.
	clAt, teAt, connAt span
	haveType           bool
	hasCE              bool
	hasDate            bool
	trailers           bool
	trailerKs          []string // declared in Trailer, canonical

	headOut    bool // the head is in c.bw: the body goes after it
	chunked    bool
	closeAfter bool
	failed     bool // a write failed: the connection closes
}

// span is a field's lines in c.head; the zero span is no field.
type span struct{ start, end int }

var (
	_ http.ResponseWriter = (*response)(nil)
	_ http.Flusher        = (*response)(nil)
)

func (w *response) Header() http.Header {
	if w.h == nil {
		w.h = make(http.Header)
	}
	return w.h
}

func (w *response) WriteHeader(code int) {
	if w.status != 0 {
		w.c.s.logf("http: superfluous response.WriteHeader call (status %d after %d)", code, w.status)
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// An informational answer goes out now, with the header as it is.
		bw := w.c.bw
		writeStatusLine(bw, code)
		var names [16]string
		for _, k := range sortedNames(names[:0], w.h) {
			vv := w.h[k]
			if k == "Content-Length" || k == "Transfer-Encoding" {
				continue
			}
			writeField(bw, k, vv)
		}
		_, _ = bw.WriteString("\r\n")
		_ = bw.Flush()
		return
	}
	w.status = code
	// The head's fields, as they are now (net/http snapshots the header
	// here), sorted; writeHead decides which of the framing ones (their
	// spans) go out.
	w.c.head = w.c.head[:0]
	noBody := !bodyAllowed(code)
	var names [16]string
	for _, k := range sortedNames(names[:0], w.h) {
		vv := w.h[k]
		switch k {
		case "Content-Length":
			w.clKey = true
			if len(vv) > 0 && vv[0] != "" {
				v, err := strconv.ParseInt(vv[0], 10, 64)
				if err != nil || v < 0 {
					w.c.s.logf("http: invalid Content-Length of %q", vv[0])
					continue
				}
				w.declared = v
			}
			w.clAt = w.appendSpan(k, vv)
			continue
		case "Transfer-Encoding":
			if len(vv) > 0 {
				w.te = vv[0]
			}
			w.teAt = w.appendSpan(k, vv)
			continue
		case "Connection":
			if len(vv) > 0 {
				w.conn = vv[0]
			}
			w.connAt = w.appendSpan(k, vv)
			continue
		case "Content-Type":
			w.haveType = true
			if code == http.StatusNotModified {
				continue
			}
		case "Content-Encoding":
			w.hasCE = len(vv) > 0 && vv[0] != ""
		case "Date":
			w.hasDate = true
		case "Trailer":
			w.trailers = true
			for _, v := range vv {
				for f := range strings.SplitSeq(v, ",") {
					if f = textproto.TrimString(f); f != "" {
						f = http.CanonicalHeaderKey(f)
						if httpguts.ValidTrailerHeader(f) {
							w.trailerKs = append(w.trailerKs, f)
						}
					}
				}
			}
		}
		if strings.HasPrefix(k, http.TrailerPrefix) {
			w.trailers = true
			continue
		}
		w.c.head = appendField(w.c.head, k, vv)
	}
	if noBody {
		w.declared = -1
	}
}

// appendSpan appends a framing field to c.head and says where it is.
func (w *response) appendSpan(k string, vv []string) span {
	start := len(w.c.head)
	w.c.head = appendField(w.c.head, k, vv)
	return span{start, len(w.c.head)}
}

func (w *response) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.declared >= 0 && w.written+int64(len(p)) > w.declared {
		return 0, http.ErrContentLength
	}
	if w.failed {
		return 0, errClosed
	}
	w.written += int64(len(p))
	if !w.headOut {
		if len(w.c.hold)+len(p) <= holdSize {
			w.c.hold = append(w.c.hold, p...)
			return len(p), nil
		}
		w.writeHead(false, p)
	}
	w.writeBody(p)
	if w.failed {
		return 0, errClosed
	}
	return len(p), nil
}

// Flush sends what is written so far.
func (w *response) Flush() { _ = w.FlushError() }

// FlushError is Flush, with the write's error (http.ResponseController).
func (w *response) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headOut {
		w.writeHead(false, nil)
	}
	if err := w.c.bw.Flush(); err != nil {
		w.failed = true
		return err
	}
	return nil
}

// SetReadDeadline and SetWriteDeadline are http.ResponseController's.
func (w *response) SetReadDeadline(t time.Time) error  { return w.c.nc.SetReadDeadline(t) }
func (w *response) SetWriteDeadline(t time.Time) error { return w.c.nc.SetWriteDeadline(t) }

// EnableFullDuplex is http.ResponseController's: a body can be read
// while the answer is written here anyway.
func (w *response) EnableFullDuplex() error { return nil }

// sniffLen is how much of a body http.DetectContentType reads.
const sniffLen = 512

var errClosed = errors.New("http: connection closed")

// writeHead puts the status line and the header in c.bw, then the body
// held so far; final says the handler has returned, so that a body
// without a declared length can be given one. next is the body's next
// bytes, for sniffing its type.
func (w *response) writeHead(final bool, next []byte) {
	w.headOut = true
	c := w.c
	code := w.status
	body := bodyAllowed(code)
	hasTE := w.te != ""
	length := w.declared
	if final && length < 0 && !w.clKey && !w.trailers && !hasTE && body {
		length = int64(len(c.hold))
	}
	if length >= 0 && hasTE && w.te != "identity" {
		length = -1 // as net/http: the handler's Transfer-Encoding wins
	}
	// The connection closes after the answer when the client asked, when
	// the handler did (net/http compares the field exactly), when the
	// server is shutting down, or when the handler left too much body
	// unread; tooBig says it left it open.
	closing := c.s.closing.Load()
	w.closeAfter = w.req.Close || w.conn == "close" || closing
	tooBig := false
	if !w.closeAfter && w.body != nil {
		// As net/http: a body closed with more than maxDiscard left, or
		// left open with maxDiscard or more.
		if remain, closed := w.body.unread(); remain > maxDiscard || !closed && remain == maxDiscard {
			w.closeAfter, tooBig = true, !closed
		}
	}
	switch {
	case !body || code == http.StatusNoContent:
		length = -1
	case length >= 0:
	case hasTE && w.te == "identity":
		w.closeAfter = true
	default:
		w.chunked = true
	}

	// The handler's fields, less the framing ones net/http would delete
	// (chunkWriter.writeHeader's delHeader calls), then those it adds, in
	// its order (extraHeader.Write).
	keepCL := w.clAt.end > 0 && body && length >= 0
	keepTE := w.teAt.end > 0 && body && length < 0 && w.te != "identity" && w.te != "chunked"
	addClose := w.closeAfter && (tooBig || closing || !httpguts.HeaderValuesContainsToken([]string{w.conn}, "close"))
	keepConn := w.connAt.end > 0 && !addClose
	bw := c.bw
	writeStatusLine(bw, code)
	at := 0
	for _, f := range [...]struct {
		span
		keep bool
	}{{w.connAt, keepConn}, {w.clAt, keepCL}, {w.teAt, keepTE}} { // sorted by name, as in c.head
		if f.end == 0 {
			continue
		}
		_, _ = bw.Write(c.head[at:f.start])
		if f.keep {
			_, _ = bw.Write(c.head[f.start:f.end])
		}
		at = f.end
	}
	_, _ = bw.Write(c.head[at:])
	if !w.hasDate {
		_, _ = bw.WriteString("Date: ")
		_, _ = bw.Write(date())
		_, _ = bw.WriteString("\r\n")
	}
	if length >= 0 && !keepCL {
		_, _ = bw.WriteString("Content-Length: ")
		p := strconv.AppendInt(bw.AvailableBuffer(), length, 10)
		_, _ = bw.Write(append(p, "\r\n"...))
	}
	if body && !w.haveType && !w.hasCE && !hasTE && len(c.hold)+len(next) > 0 {
		// As net/http, from the body's first bytes (it sniffs 512 at most).
		first := c.hold
		if len(first) < sniffLen && len(next) > 0 {
			first = append(first[:len(first):len(first)], next[:min(len(next), sniffLen-len(first))]...)
		}
		writeField1(bw, "Content-Type", http.DetectContentType(first))
	}
	if addClose {
		_, _ = bw.WriteString("Connection: close\r\n")
	}
	if w.chunked {
		_, _ = bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	_, _ = bw.WriteString("\r\n")
	if len(c.hold) > 0 {
		p := c.hold
		c.hold = c.hold[:0]
		w.writeBody(p)
	}
}

// writeBody puts body bytes in c.bw, as a chunk when chunked.
func (w *response) writeBody(p []byte) {
	bw := w.c.bw
	if !bodyAllowed(w.status) {
		return
	}
	if w.chunked {
		size := strconv.AppendInt(bw.AvailableBuffer(), int64(len(p)), 16)
		_, _ = bw.Write(append(size, "\r\n"...))
		_, _ = bw.Write(p)
		_, err := bw.WriteString("\r\n")
		if err != nil {
			w.failed = true
		}
		return
	}
	if _, err := bw.Write(p); err != nil {
		w.failed = true
	}
}

// finish ends the answer after the handler has returned; it reports
// whether the connection can carry the next request.
func (w *response) finish() bool {
	c := w.c
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headOut {
		w.writeHead(true, nil)
	}
	if w.chunked {
		_, _ = c.bw.WriteString("0\r\n")
		w.writeTrailers()
		_, _ = c.bw.WriteString("\r\n")
	}
	if err := c.bw.Flush(); err != nil {
		w.failed = true
	}
	c.hold = c.hold[:0]
	if w.declared >= 0 && w.written < w.declared {
		// Fewer bytes than declared: the client waits for the rest, which
		// only the close tells it will not come.
		w.closeAfter = true
	}
	keep := !w.failed && !w.closeAfter
	if w.body != nil {
		keep = w.body.end(keep)
	}
	return keep
}

// writeTrailers writes the trailers after the last chunk, as net/http's
// response.finalTrailers finds them.
func (w *response) writeTrailers() {
	for k, vv := range w.h {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			writeField(w.c.bw, name, vv)
		}
	}
	for _, k := range w.trailerKs {
		if vv, ok := w.h[k]; ok {
			writeField(w.c.bw, k, vv)
		}
	}
}

// sortedNames appends h's names to names, in order: the head's fields go
// out sorted by name, as net/http's Header.Write writes them.
func sortedNames(names []string, h http.Header) []string {
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// bodyAllowed reports whether an answer of this status has a body
// (net/http's bodyAllowedForStatus).
func bodyAllowed(code int) bool {
	switch {
	case code >= 100 && code <= 199:
		return false
	case code == http.StatusNoContent, code == http.StatusNotModified:
		return false
	}
	return true
}

// The head's lines are appended to the writer's free buffer
// (AvailableBuffer), so that they are made in place.

func writeStatusLine(bw *bufio.Writer, code int) {
	p := append(bw.AvailableBuffer(), "HTTP/1.1 "...)
	p = strconv.AppendInt(p, int64(code), 10)
	p = append(p, ' ')
	if text := http.StatusText(code); text != "" {
		p = append(p, text...)
	} else {
		p = append(p, "status code "...)
		p = strconv.AppendInt(p, int64(code), 10)
	}
	p = append(p, "\r\n"...)
	_, _ = bw.Write(p)
}

// appendField appends a field's lines as net/http's Header.Write does:
// a name that is not a token is left out, and CR or LF in a value
// becomes a space.
func appendField(b []byte, k string, vv []string) []byte {
	if !httpguts.ValidHeaderFieldName(k) {
		return b
	}
	for _, v := range vv {
		b = append(b, k...)
		b = append(b, ": "...)
		start := len(b)
		b = append(b, textproto.TrimString(v)...)
		for i := start; i < len(b); i++ {
			if b[i] == '\r' || b[i] == '\n' {
				b[i] = ' '
			}
		}
		b = append(b, "\r\n"...)
	}
	return b
}

func writeField(bw *bufio.Writer, k string, vv []string) {
	_, _ = bw.Write(appendField(bw.AvailableBuffer(), k, vv))
}

func writeField1(bw *bufio.Writer, k, v string) {
	_, _ = bw.Write(appendField(bw.AvailableBuffer(), k, []string{v}))
}

// date is the Date field's value, made once a second.
func date() []byte {
	now := time.Now()
	sec := now.Unix()
	if d := cachedDate.Load(); d != nil && d.sec == sec {
		return d.b
	}
	d := &dated{sec: sec, b: now.UTC().AppendFormat(make([]byte, 0, len(http.TimeFormat)), http.TimeFormat)}
	cachedDate.Store(d)
	return d.b
}

type dated struct {
	sec int64
	b   []byte
}

var cachedDate atomic.Pointer[dated]
