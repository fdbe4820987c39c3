package h1

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine (a connection, a
// watching read) outlives them.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// echo is the handler both servers run in the comparisons: it answers
// with what it was given, in the ways the query asks for.
func echo(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var body []byte
	if q.Has("closebody") {
		_ = r.Body.Close()
	}
	if !q.Has("noread") && !q.Has("closebody") {
		var err error
		if body, err = io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	seen := map[string]any{
		"method": r.Method, "uri": r.RequestURI, "url": r.URL.String(), "proto": r.Proto,
		"host": r.Host, "header": r.Header, "length": r.ContentLength, "close": r.Close,
		"body": string(body), "remote": r.RemoteAddr != "", "server": r.Context().Value(http.ServerContextKey) != nil,
	}
	out, _ := json.Marshal(seen)
	h := w.Header()
	if !q.Has("notype") {
		h.Set("Content-Type", "application/json")
	}
	if v := q.Get("cl"); v != "" {
		h.Set("Content-Length", v)
	}
	if q.Has("trailer") {
		h.Set("Trailer", "X-Sum")
	}
	if q.Has("cl-empty") {
		h["Content-Length"] = []string{""}
	}
	if q.Has("conn-close") {
		h.Set("Connection", "close")
	}
	if v := q.Get("conn"); v != "" {
		h.Set("Connection", v)
	}
	if v := q.Get("te"); v != "" {
		h.Set("Transfer-Encoding", v)
	}
	h.Add("X-Multi", "a")
	h.Add("X-Multi", "b\r\nInjected: yes")
	code := http.StatusOK
	if v := q.Get("status"); v != "" {
		code, _ = strconv.Atoi(v)
	}
	if q.Has("early") {
		w.WriteHeader(http.StatusEarlyHints)
	}
	w.WriteHeader(code)
	h.Set("X-After-WriteHeader", "ignored")
	switch {
	case q.Has("html"):
		_, _ = io.WriteString(w, "<html><body>hello</body></html>")
	case q.Has("big"):
		_, _ = w.Write(bytes.Repeat(out, 1+3*holdSize/len(out)))
	case q.Has("flush"):
		for i := range 3 {
			fmt.Fprintf(w, "data: %d %s\n\n", i, out)
			http.NewResponseController(w).Flush()
		}
	case q.Has("short"):
		_, _ = w.Write(out[:1])
	default:
		_, _ = w.Write(out)
	}
	if q.Has("trailer") {
		h.Set("X-Sum", strconv.Itoa(len(out)))
		h.Set(http.TrailerPrefix+"X-Late", "late")
	}
	if q.Has("abort") {
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	}
}

// pair is net/http's server and Server, serving the same handler.
type pair struct {
	std, fast string // addresses
}

func newPair(t *testing.T, h http.Handler, fast func(method, path string) bool) pair {
	t.Helper()
	quiet := log.New(io.Discard, "", 0)
	stdLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	std := &http.Server{Handler: h, ErrorLog: quiet, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = std.Serve(stdLn) }()
	fastLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{HTTP: &http.Server{Handler: h, ErrorLog: quiet, ReadHeaderTimeout: 5 * time.Second}, Fast: fast}
	served := make(chan error, 1)
	go func() { served <- s.Serve(fastLn) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = std.Shutdown(ctx)
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return pair{std: stdLn.Addr().String(), fast: fastLn.Addr().String()}
}

// exchange writes raw on a new connection to addr and reads the answers
// to the requests in it (HEAD never: Server does not serve it); closed
// says whether the server then closed the connection.
type answer struct {
	status  int
	header  http.Header
	body    string
	trailer http.Header
	err     string // reading the body failed
}

func exchange(t *testing.T, addr, raw string, n int) (answers []answer, wire string, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	br := bufio.NewReader(io.TeeReader(c, &got))
	defer func() { wire = withoutDate(got.String()) }() // whichever way it returns
	for range n {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			return answers, "", true
		}
		b, err := io.ReadAll(res.Body)
		a := answer{status: res.StatusCode, header: res.Header, body: string(b), trailer: res.Trailer}
		if err != nil {
			a.err = err.Error()
		}
		a.header.Del("Date")
		answers = append(answers, a)
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err = br.ReadByte()
	var ne net.Error
	closed = !(errors.As(err, &ne) && ne.Timeout())
	return answers, "", closed
}

// withoutDate is an answer's bytes without their Date fields' lines.
func withoutDate(wire string) string {
	var lines []string
	for line := range strings.SplitSeq(wire, "\r\n") {
		if !strings.HasPrefix(line, "Date: ") {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\r\n")
}

func req(method, target string, header string, body string) string {
	if body != "" {
		header += "Content-Length: " + strconv.Itoa(len(body)) + "\r\n"
	}
	return method + " " + target + " HTTP/1.1\r\nHost: example.test\r\n" + header + "\r\n" + body
}

// TestSameAsNetHTTP sends the same bytes to net/http's server and to
// Server, and compares what comes back: status, fields (Date aside),
// body, trailers, and whether the connection stays open.
func TestSameAsNetHTTP(t *testing.T) {
	p := newPair(t, http.HandlerFunc(echo), nil)
	cases := map[string]struct {
		raw string
		n   int
	}{
		"post":                {req("POST", "/generate", "", `{"input_ids":[1,2,3]}`), 1},
		"get no body":         {req("GET", "/v1/models?x=1&y=%20", "Accept: */*\r\n", ""), 1},
		"fields":              {req("POST", "/a", "x-lower: v\r\nX-Dup: 1\r\nx-dup: 2\r\nX-Space:   padded  \t\r\nEmpty:\r\n", "b"), 1},
		"two on one conn":     {req("POST", "/a", "", "one") + req("POST", "/b", "", "two"), 2},
		"connection close":    {req("POST", "/a", "Connection: close\r\n", "x") + req("POST", "/b", "", "y"), 2},
		"keep-alive token":    {req("POST", "/a", "Connection: keep-alive, Foo\r\n", "x"), 1},
		"no content type":     {req("POST", "/a?notype", "", "x"), 1},
		"sniffed html":        {req("POST", "/a?notype&html", "", "x"), 1},
		"declared length":     {req("POST", "/a?cl=", "", "x"), 1},
		"big chunked":         {req("POST", "/a?big", "", "x") + req("POST", "/b", "", "y"), 2},
		"big no type":         {req("POST", "/a?big&notype", "", "x"), 1},
		"flushed stream":      {req("POST", "/a?flush", "", "x") + req("POST", "/b", "", "y"), 2},
		"trailers":            {req("POST", "/a?trailer", "", "x") + req("POST", "/b", "", "y"), 2},
		"no content":          {req("POST", "/a?status=204", "", "x") + req("POST", "/b", "", "y"), 2},
		"not modified":        {req("POST", "/a?status=304", "", "x"), 1},
		"odd status":          {req("POST", "/a?status=599", "", "x"), 1},
		"early hints":         {req("POST", "/a?early", "", "x"), 1},
		"handler close":       {req("POST", "/a?conn-close", "", "x") + req("POST", "/b", "", "y"), 2},
		"fewer than length":   {req("POST", "/a?cl=100&short", "", "x") + req("POST", "/b", "", "y"), 2},
		"unread body":         {req("POST", "/a?status=201&noread", "", strings.Repeat("z", 5000)) + req("POST", "/b", "", "y"), 2},
		"aborted":             {req("POST", "/a?flush&abort", "", "x") + req("POST", "/b", "", "y"), 2},
		"pipelined after get": {req("GET", "/a", "", "") + req("POST", "/b", "", "y"), 2},
		"empty length":        {req("POST", "/a?cl-empty", "", "x") + req("POST", "/b", "", "y"), 2},
		"invalid length":      {req("POST", "/a?cl=abc", "", "x") + req("POST", "/b", "", "y"), 2},
		"no content, length":  {req("POST", "/a?status=204&cl=5", "", "x") + req("POST", "/b", "", "y"), 2},
		"handler chunked":     {req("POST", "/a?te=chunked", "", "x") + req("POST", "/b", "", "y"), 2},
		"handler identity":    {req("POST", "/a?te=identity", "", "x") + req("POST", "/b", "", "y"), 2},
		"handler gzip":        {req("POST", "/a?te=gzip", "", "x"), 1}, // two Transfer-Encoding lines: Go's client reads neither
		"handler te, length":  {req("POST", "/a?te=chunked&cl=5", "", "x") + req("POST", "/b", "", "y"), 2},
		"handler keep-alive":  {req("POST", "/a?conn=keep-alive", "", "x") + req("POST", "/b", "", "y"), 2},
		"handler Close":       {req("POST", "/a?conn=Close", "", "x") + req("POST", "/b", "", "y"), 2},
		"handler close token": {req("POST", "/a?conn=foo,close", "", "x") + req("POST", "/b", "", "y"), 2},
		"both close":          {req("POST", "/a?conn=Close", "Connection: close\r\n", "x"), 1},
		"closed body":         {req("POST", "/a?closebody", "", strings.Repeat("z", 5000)) + req("POST", "/b", "", "y"), 2},
		"closed big body":     {req("POST", "/a?closebody", "", strings.Repeat("z", maxDiscard)), 1},
		"big unread body":     {req("POST", "/a?noread", "", strings.Repeat("z", maxDiscard)), 1},
		"big unread, close":   {req("POST", "/a?noread&conn=keep-alive", "", strings.Repeat("z", maxDiscard+1)), 1},
		"unread just under":   {req("POST", "/a?noread", "", strings.Repeat("z", maxDiscard-1)) + req("POST", "/b", "", "y"), 2},

		// Handed to net/http: it answers them itself.
		"chunked body":       {"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + req("POST", "/b", "", "y"), 2},
		"expect continue":    {req("POST", "/a", "Expect: 100-continue\r\n", "x"), 1},
		"http/1.0":           {"POST /a HTTP/1.0\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", 1},
		"absolute form":      {"POST http://h/a HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", 1},
		"bare LF":            {"POST /a HTTP/1.1\nHost: h\nContent-Length: 1\n\nx", 1},
		"missing host":       {"POST /a HTTP/1.1\r\nContent-Length: 1\r\n\r\nx", 1},
		"two hosts":          {"POST /a HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 1\r\n\r\nx", 1},
		"bad host":           {"POST /a HTTP/1.1\r\nHost: a b\r\nContent-Length: 1\r\n\r\nx", 1},
		"space before colon": {"POST /a HTTP/1.1\r\nHost: h\r\nX-A : 1\r\n\r\n", 1},
		"folded line":        {"POST /a HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n  2\r\n\r\n", 1},
		"two lengths":        {"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy", 1},
		"same two lengths":   {"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", 1},
		"length and chunked": {"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 1},
		"signed length":      {"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: +1\r\n\r\nx", 1},
		"pragma":             {req("POST", "/a", "Pragma: no-cache\r\n", "x"), 1},
		"bad method":         {"P@ST /a HTTP/1.1\r\nHost: h\r\n\r\n", 1},
		"control in value":   {"POST /a HTTP/1.1\r\nHost: h\r\nX-A: a\x01b\r\n\r\n", 1},
		"long head":          {req("POST", "/a", "X-Long: "+strings.Repeat("l", readSize)+"\r\n", "x"), 1},
		"fast then handed":   {req("POST", "/a", "", "x") + "POST /b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\ny\r\n0\r\n\r\n" + req("POST", "/c", "", "z"), 3},
		"leading blank line": {"\r\n" + req("POST", "/a", "", "x"), 1},
	}
	// The cases net/http is to answer: Server hands their connection over
	// at the first request.
	handed := map[string]bool{
		"chunked body": true, "expect continue": true, "http/1.0": true, "absolute form": true,
		"bare LF": true, "missing host": true, "two hosts": true, "bad host": true,
		"space before colon": true, "folded line": true, "two lengths": true, "same two lengths": true,
		"length and chunked": true, "signed length": true, "pragma": true, "bad method": true,
		"control in value": true, "long head": true, "leading blank line": true,
	}
	names := make([]string, 0, len(cases))
	for name := range cases {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		tc := cases[name]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := []byte(tc.raw)
			fast := false
			if n := headEnd(b); n > 0 && n <= readSize {
				_, fast = parseHead(b[:n])
			}
			if fast == handed[name] {
				t.Errorf("served here: %v, want %v", fast, !handed[name])
			}
			want, wantWire, wantClosed := exchange(t, p.std, tc.raw, tc.n)
			got, gotWire, gotClosed := exchange(t, p.fast, tc.raw, tc.n)
			if len(want) == 0 && (name != "handler gzip" || !strings.HasPrefix(wantWire, "HTTP/1.1 200 OK")) {
				t.Fatalf("net/http answered nothing: the case tests nothing")
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("answers differ\n got: %+v\nwant: %+v", got, want)
			}
			if gotWire != wantWire {
				t.Errorf("bytes differ\n got: %q\nwant: %q", gotWire, wantWire)
			}
			if gotClosed != wantClosed {
				t.Errorf("connection closed after the answers: got %v, want %v (net/http)", gotClosed, wantClosed)
			}
		})
	}
}

// An answer's head is net/http's byte for byte, Date aside: the fields in
// the same order (sorted by name), more of them than sortedNames holds on
// the stack too.
func TestSameHeadBytes(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		for i := range n {
			w.Header().Set(fmt.Sprintf("X-Field-%02d", (i*7)%n), strconv.Itoa(i))
		}
		w.Header().Add("Vary", "b")
		w.Header().Add("Vary", "a")
		_, _ = io.WriteString(w, `{"ok":true}`)
	})
	p := newPair(t, h, nil)
	for _, n := range []int{0, 3, 40} {
		raw := req("POST", "/fields?n="+strconv.Itoa(n), "", "x")
		_, want, _ := exchange(t, p.std, raw, 1)
		_, got, _ := exchange(t, p.fast, raw, 1)
		if !strings.HasPrefix(want, "HTTP/1.1 200 OK") || got != want {
			t.Errorf("n=%d: got\n%s\nwant (net/http)\n%s", n, got, want)
		}
	}
}
