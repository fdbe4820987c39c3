package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReadBody(t *testing.T) {
	const limit = 16
	for _, tc := range []struct {
		name     string
		body     io.Reader
		declared int64
		want     string
		tooLarge bool
		err      bool
	}{
		{name: "declared", body: strings.NewReader("0123456789"), declared: 10, want: "0123456789"},
		{name: "declared, read one byte at a time", body: iotest.OneByteReader(strings.NewReader("0123456789")), declared: 10, want: "0123456789"},
		{name: "empty", body: strings.NewReader(""), declared: 0, want: ""},
		{name: "unknown length", body: strings.NewReader("0123456789"), declared: -1, want: "0123456789"},
		{name: "longer than declared", body: strings.NewReader("0123456789abc"), declared: 10, want: "0123456789abc"},
		{name: "longer than declared and the limit", body: strings.NewReader(strings.Repeat("x", 40)), declared: 10, tooLarge: true},
		{name: "declared past the limit", body: strings.NewReader(strings.Repeat("x", 17)), declared: 17, tooLarge: true},
		{name: "unknown length past the limit", body: strings.NewReader(strings.Repeat("x", 17)), declared: -1, tooLarge: true},
		{name: "exactly the limit", body: strings.NewReader(strings.Repeat("x", limit)), declared: limit, want: strings.Repeat("x", limit)},
		{name: "shorter than declared", body: strings.NewReader("0123"), declared: 10, err: true},
		{name: "failing", body: iotest.ErrReader(errors.New("gone")), declared: 10, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &closeRecorder{Reader: tc.body}
			r := httptest.NewRequest(http.MethodPost, "/generate", body)
			r.ContentLength = tc.declared
			got, err := readBody(httptest.NewRecorder(), r, limit)
			if body.closed != (err == nil) {
				t.Errorf("body closed %v after err = %v; want it closed when read whole", body.closed, err)
			}
			var tooLarge *http.MaxBytesError
			switch {
			case tc.tooLarge:
				if !errors.As(err, &tooLarge) {
					t.Fatalf("err = %v, want an *http.MaxBytesError", err)
				}
			case tc.err:
				if err == nil || errors.As(err, &tooLarge) {
					t.Fatalf("err = %v, want the read's error", err)
				}
			case err != nil:
				t.Fatalf("err = %v", err)
			case !bytes.Equal(got, []byte(tc.want)):
				t.Fatalf("body = %q, want %q", got, tc.want)
			}
		})
	}
}

// closeRecorder is a request body that records its Close.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

// BenchmarkReadBody compares readBody with the io.ReadAll it replaced.
func BenchmarkReadBody(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 3000) // a prompt of a few hundred tokens
	for _, read := range []struct {
		name string
		read func(http.ResponseWriter, *http.Request) ([]byte, error)
	}{
		{"readBody", func(w http.ResponseWriter, r *http.Request) ([]byte, error) { return readBody(w, r, DefaultMaxBody) }},
		{"io.ReadAll", func(w http.ResponseWriter, r *http.Request) ([]byte, error) {
			return io.ReadAll(http.MaxBytesReader(w, r.Body, DefaultMaxBody))
		}},
	} {
		b.Run(read.name, func(b *testing.B) {
			b.ReportAllocs()
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/generate", nil)
			r.ContentLength = int64(len(payload))
			var body bytes.Reader
			for b.Loop() {
				body.Reset(payload)
				r.Body = io.NopCloser(&body)
				if _, err := read.read(w, r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
