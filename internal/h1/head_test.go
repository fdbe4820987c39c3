package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"testing"
)

// FuzzParseHead checks parseHead against net/http's reading of the same
// bytes: every head it takes, http.ReadRequest reads to the same method,
// target, URL, Host, fields (without Host, as net/http leaves them),
// body length and Connection: close. What it does not take goes to
// net/http, so a head it refuses needs no check.
func FuzzParseHead(f *testing.F) {
	for _, s := range []string{
		"POST /generate HTTP/1.1\r\nHost: h\r\nContent-Length: 12\r\n\r\n",
		"POST /v1/completions?x=%20 HTTP/1.1\r\nhost: h:80\r\ncontent-type: application/json\r\nX-A: 1\r\nx-a: 2\r\nAuthorization: Bearer t\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: [::1]:8080\r\nConnection: keep-alive, close\r\nX-E:\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: h\r\nX-Pad: \t v \t\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: h\r\nX: \x80\xff\r\n\r\n",
		"POST //a/../b HTTP/1.1\r\nHost: h\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n := headEnd(b)
		if n <= 0 {
			return
		}
		h, ok := parseHead(b[:n])
		if !ok {
			return
		}
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b[:n])))
		if err != nil {
			t.Fatalf("parseHead took a head net/http refuses (%v): %q", err, b[:n])
		}
		got := fmt.Sprint(h.method, " ", h.target, " ", h.url, " ", h.host, " ", h.header, " ", h.contentLength, " ", h.close)
		want := fmt.Sprint(r.Method, " ", r.RequestURI, " ", r.URL, " ", r.Host, " ", r.Header, " ", r.ContentLength, " ", r.Close)
		if got != want {
			t.Fatalf("head %q\n got: %s\nwant: %s", b[:n], got, want)
		}
		if r.Proto != "HTTP/1.1" || len(r.TransferEncoding) > 0 || r.Header.Get("Cache-Control") != h.header.Get("Cache-Control") {
			t.Fatalf("head %q: net/http reads %s, Transfer-Encoding %q, Cache-Control %q: not one parseHead takes", b[:n], r.Proto, r.TransferEncoding, r.Header.Get("Cache-Control"))
		}
	})
}

func TestHeadEnd(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"POST / HTTP/1.1\r\n", 0},
		{"POST / HTTP/1.1\r\nHost: h\r\n\r\n", 28},
		{"POST / HTTP/1.1\r\nHost: h\r\n\r\nbody", 28},
		{"POST / HTTP/1.1\nHost: h\r\n\r\n", -1},
		{"\r\nPOST / HTTP/1.1\r\n\r\n", -1},
		{"\n", -1},
	} {
		if got := headEnd([]byte(tc.in)); got != tc.want {
			t.Errorf("headEnd(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
