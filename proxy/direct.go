package proxy

import (
	"io"
	"iter"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// The direct path. A proxied request to an http:// policy that
// transport.go carries, resumable or not, is forwarded without
// httputil.ReverseProxy: its head is written straight into one buffer
// with the body behind it, sent in one write, and the answer is copied to
// the client. ReverseProxy's general work per request (cloning the
// request and its headers, deleting hop-by-hop headers one map operation
// at a time, sorting the headers to write them, wrapping the body, a
// context value to find the attempt) was a fifth of the router's CPU per
// proxied request in the proxy benchmark's profile.
//
// What goes out and what comes back are ReverseProxy's own, as its
// source (net/http/httputil/reverseproxy.go, go1.26) does them with a
// Rewrite of SetURL and SetXForwarded: the request-target joined to the
// policy URL's path and query (joinURLPath, rewriteRequestURL), Host the
// policy's, hop-by-hop headers and those the Connection header names
// dropped on both legs (removeHopByHopHeaders), "Te: trailers" kept,
// Forwarded dropped, X-Forwarded-For (the client's address),
// X-Forwarded-Host and X-Forwarded-Proto set, no User-Agent added; the
// answer's headers copied and its trailers announced and copied; event
// streams and answers of unknown length flushed after every write; an
// answer that fails once begun aborts the client's connection
// (http.ErrAbortHandler), as ReverseProxy does. Requests it does not
// take (an Upgrade, Expect, trailers, a key that is not a valid header
// value, a streamed resumable /generate: resume_stream.go announces its
// trailers in the answer's Trailer header, which ReverseProxy carries and
// removeHopByHop would drop) go to ReverseProxy.

// direct reports whether the attempt can take the direct path to t.
func (p *Proxy) direct(r *http.Request, t *target, a *attempt) bool {
	if !t.wire || (a.resume != nil && a.resume.stream != nil) || len(r.Trailer) > 0 || !httpguts.ValidHeaderFieldValue(a.apiKey) {
		return false
	}
	h := r.Header
	return len(h["Upgrade"]) == 0 && len(h["Expect"]) == 0
}

// forwardDirect sends the attempt's request to t over tr and copies the
// answer to w, ending as forward's ReverseProxy does.
// A deadline, when not zero, bounds the attempt (--proxy-timeout) as a
// context's would: its errors are context.DeadlineExceeded.
func (p *Proxy) forwardDirect(w http.ResponseWriter, r *http.Request, body []byte, t *target, tr *transport, a *attempt, deadline time.Time) {
	buf := wireBuffers.Get().(*[]byte)
	msg := appendRequest((*buf)[:0], r, t.url, a.apiKey, body)
	res, err := tr.roundTrip(r.Context(), t.key, r, msg, deadline)
	putWireBuffer(buf, msg)
	if err != nil {
		p.attemptError(w, r, a, err)
		return
	}
	if err := p.answer(res, a); err != nil {
		_ = res.Body.Close()
		p.attemptError(w, r, a, err)
		return
	}
	removeHopByHop(res.Header)
	dst := w.Header()
	for k, vv := range res.Header {
		if old := dst[k]; old != nil {
			dst[k] = append(old, vv...)
		} else {
			dst[k] = vv // res is the attempt's alone: its slices need no copy
		}
	}
	announced := len(res.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		dst.Add("Trailer", strings.Join(keys, ", "))
	}
	w.WriteHeader(res.StatusCode)
	flush := isEventStream(res.Header) || res.ContentLength == -1
	if err := copyAnswer(w, res.Body, flush); err != nil {
		_ = res.Body.Close()
		if r.Context().Value(http.ServerContextKey) != nil {
			panic(http.ErrAbortHandler)
		}
		return
	}
	_ = res.Body.Close() // now, to fill res.Trailer
	if len(res.Trailer) > 0 {
		// Chunked, so that the trailers can follow.
		_ = http.NewResponseController(w).Flush()
	}
	if len(res.Trailer) == announced {
		for k, vv := range res.Trailer {
			dst[k] = append(dst[k], vv...)
		}
		return
	}
	for k, vv := range res.Trailer {
		k = http.TrailerPrefix + k
		dst[k] = append(dst[k], vv...)
	}
}

// copyAnswer copies an answer's body to w, flushing after every write
// when flush is set. A read error other than the end is returned, as a
// write error is.
func copyAnswer(w http.ResponseWriter, body io.Reader, flush bool) error {
	bp := copyBuffers.pool.Get().(*[]byte)
	defer copyBuffers.pool.Put(bp)
	buf := *bp
	rc := http.NewResponseController(w)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
			if flush {
				if err := rc.Flush(); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// wireBuffers hold requests as they go on the wire while they are sent.
var wireBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// putWireBuffer returns a wire buffer to the pool, unless a large body
// grew it past what most requests need.
func putWireBuffer(buf *[]byte, used []byte) {
	if cap(used) > 64<<10 {
		return
	}
	*buf = used[:0]
	wireBuffers.Put(buf)
}

// hopHeaders are the headers that concern one connection only, never
// forwarded (RFC 9110 section 7.6.1; httputil's list).
var hopHeaders = map[string]bool{
	"Connection":          true,
	"Proxy-Connection":    true,
	"Keep-Alive":          true,
	"Proxy-Authenticate":  true,
	"Proxy-Authorization": true,
	"Te":                  true,
	"Trailer":             true,
	"Transfer-Encoding":   true,
	"Upgrade":             true,
}

// removeHopByHop drops an answer's hop-by-hop headers and those its
// Connection header names.
func removeHopByHop(h http.Header) {
	for name := range connectionTokens(h) {
		if strings.EqualFold(name, "keep-alive") {
			delete(h, "Keep-Alive") // the usual token, without canonicalising it
			continue
		}
		h.Del(name)
	}
	for k := range h {
		if hopHeaders[k] {
			delete(h, k)
		}
	}
}

// connectionTokens yields the header names h's Connection header lists.
func connectionTokens(h http.Header) iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, f := range h["Connection"] {
			for name := range strings.SplitSeq(f, ",") {
				if name = textproto.TrimString(name); name != "" && !yield(name) {
					return
				}
			}
		}
	}
}

// Headers the request head writes itself, or drops.
var ownHeaders = map[string]bool{
	"Host":              true,
	"Content-Length":    true,
	"Authorization":     true,
	"Forwarded":         true,
	"X-Forwarded-For":   true,
	"X-Forwarded-Host":  true,
	"X-Forwarded-Proto": true,
}

// appendRequest appends to dst the HTTP/1.1 request r forwarded to the
// policy at u, with key as its bearer token ("" none) and body as its
// body. r's headers come from net/http's server, which refused any that
// were not valid field names and values.
func appendRequest(dst []byte, r *http.Request, u *url.URL, key string, body []byte) []byte {
	dst = append(dst, r.Method...)
	dst = append(dst, ' ')
	dst = appendRequestURI(dst, u, r.URL)
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, u.Host...)
	dst = append(dst, "\r\nContent-Length: "...)
	dst = strconv.AppendInt(dst, int64(len(body)), 10)
	dst = append(dst, "\r\n"...)
	var named []string // the headers the Connection header names
	for name := range connectionTokens(r.Header) {
		named = append(named, http.CanonicalHeaderKey(name))
	}
	for k, vv := range r.Header {
		if hopHeaders[k] || ownHeaders[k] || (named != nil && slices.Contains(named, k)) {
			continue
		}
		for _, v := range vv {
			dst = appendField(dst, k, v)
		}
	}
	if te := r.Header["Te"]; len(te) > 0 && httpguts.HeaderValuesContainsToken(te, "trailers") {
		dst = appendField(dst, "Te", "trailers")
	}
	if key != "" {
		dst = append(dst, "Authorization: Bearer "...)
		dst = append(dst, key...)
		dst = append(dst, "\r\n"...)
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		dst = appendField(dst, "X-Forwarded-For", ip)
	}
	dst = appendField(dst, "X-Forwarded-Host", r.Host)
	if r.TLS == nil {
		dst = appendField(dst, "X-Forwarded-Proto", "http")
	} else {
		dst = appendField(dst, "X-Forwarded-Proto", "https")
	}
	dst = append(dst, "\r\n"...)
	return append(dst, body...)
}

func appendField(dst []byte, k, v string) []byte {
	dst = append(dst, k...)
	dst = append(dst, ": "...)
	dst = append(dst, textproto.TrimString(v)...)
	return append(dst, "\r\n"...)
}

// appendRequestURI appends the request-target of in forwarded to the
// policy at u: u's path joined to in's, and both queries, as httputil's
// rewriteRequestURL and joinURLPath make them.
func appendRequestURI(dst []byte, u, in *url.URL) []byte {
	if u.Path == "" && u.RawPath == "" && u.RawQuery == "" {
		return append(dst, in.RequestURI()...)
	}
	out := url.URL{RawQuery: in.RawQuery}
	if u.RawQuery != "" {
		out.RawQuery = u.RawQuery
		if in.RawQuery != "" {
			out.RawQuery += "&" + in.RawQuery
		}
	}
	if u.RawPath == "" && in.RawPath == "" {
		out.Path = singleJoiningSlash(u.Path, in.Path)
	} else {
		apath, bpath := u.EscapedPath(), in.EscapedPath()
		aslash, bslash := strings.HasSuffix(apath, "/"), strings.HasPrefix(bpath, "/")
		switch {
		case aslash && bslash:
			out.Path, out.RawPath = u.Path+in.Path[1:], apath+bpath[1:]
		case !aslash && !bslash:
			out.Path, out.RawPath = u.Path+"/"+in.Path, apath+"/"+bpath
		default:
			out.Path, out.RawPath = u.Path+in.Path, apath+bpath
		}
	}
	return append(dst, out.RequestURI()...)
}

func singleJoiningSlash(a, b string) string {
	aslash, bslash := strings.HasSuffix(a, "/"), strings.HasPrefix(b, "/")
	switch {
	case aslash && bslash:
		return a + b[1:]
	case !aslash && !bslash:
		return a + "/" + b
	}
	return a + b
}
