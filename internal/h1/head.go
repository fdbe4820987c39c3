package h1

import (
	"bytes"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// head is a request's head as net/http's readRequest reads it: the
// fields of its http.Request.
type head struct {
	size          int // bytes, the blank line included
	method        string
	target        string // the request-target, RequestURI
	url           *url.URL
	header        http.Header // without Host, as net/http leaves it
	host          string
	contentLength int64
	close         bool // Connection: close
}

// headEnd is the length of the request head at the start of buf, its
// blank line included; 0 while it has not all arrived. -1 says the head
// is not for parseHead: it has a line ended by a bare LF, or starts with
// an empty line.
func headEnd(buf []byte) int {
	start := 0
	for {
		i := bytes.IndexByte(buf[start:], '\n')
		if i < 0 {
			return 0
		}
		i += start
		if i == 0 || buf[i-1] != '\r' {
			return -1
		}
		if i-1 == start { // an empty line
			if start == 0 {
				return -1
			}
			return i + 1
		}
		start = i + 1
	}
}

// parseHead parses a request head (headEnd's bytes). !ok says it is not
// one Server serves (see the package comment): net/http is to read it,
// and answer it if it is bad.
func parseHead(b []byte) (h head, ok bool) {
	s := string(b[:len(b)-4]) // without the last line's CRLF and the blank line
	h.size = len(b)

	// The request line: method SP target SP HTTP/1.1.
	line, rest, _ := strings.Cut(s, "\r\n")
	method, line, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(line, " ")
	if !ok1 || !ok2 || proto != "HTTP/1.1" || !httpguts.ValidHeaderFieldName(method) ||
		len(target) == 0 || target[0] != '/' || !validTarget(target) {
		return head{}, false
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return head{}, false
	}
	h.method, h.target, h.url = method, target, u

	// The fields, as textproto.Reader.ReadMIMEHeader reads them: names
	// canonical, values trimmed, repeated names' values in order.
	n := 0
	if rest != "" {
		n = strings.Count(rest, "\r\n") + 1
	}
	h.header = make(http.Header, n)
	strs := make([]string, n) // one array for the values, as textproto does
	hosts := 0
	for rest != "" {
		line, rest, _ = strings.Cut(rest, "\r\n")
		name, value, found := strings.Cut(line, ":")
		if !found || !httpguts.ValidHeaderFieldName(name) {
			return head{}, false // also a folded line: it starts with a space
		}
		if !httpguts.ValidHeaderFieldValue(value) { // before trimming, which would take a CR off
			return head{}, false
		}
		value = textproto.TrimString(value)
		name = textproto.CanonicalMIMEHeaderKey(name)
		switch name {
		case "Transfer-Encoding", "Expect", "Upgrade", "Pragma":
			// Pragma: net/http adds a Cache-Control; the others change
			// the framing or the connection.
			return head{}, false
		case "Host":
			hosts++
			h.host = value
			continue
		}
		if vv, seen := h.header[name]; seen {
			h.header[name] = append(vv, value)
			continue
		}
		strs[0] = value
		h.header[name] = strs[:1:1]
		strs = strs[1:]
	}
	if hosts != 1 || !httpguts.ValidHostHeader(h.host) {
		return head{}, false
	}
	switch cl := h.header["Content-Length"]; len(cl) {
	case 0:
	case 1:
		v, ok := contentLength(cl[0])
		if !ok {
			return head{}, false
		}
		h.contentLength = v
	default:
		return head{}, false
	}
	h.close = httpguts.HeaderValuesContainsToken(h.header["Connection"], "close")
	return h, true
}

// validTarget reports whether a request-target has only visible ASCII.
func validTarget(t string) bool {
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] >= 0x7f {
			return false
		}
	}
	return true
}

// contentLength parses a Content-Length of 1 to 18 digits.
func contentLength(v string) (int64, bool) {
	if v == "" || len(v) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(v[i]-'0')
	}
	return n, true
}
