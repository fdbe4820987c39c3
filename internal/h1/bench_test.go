package h1

import (
	"bufio"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"testing"
	"time"
)

// BenchmarkServe is one small POST and its small answer on a keep-alive
// connection, served by net/http's server and by Server, with the same
// handler; the client writes and reads raw bytes.
//
//	go test -run XXX -bench Serve -benchmem ./internal/h1
func BenchmarkServe(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"text":"ok"}`)
	})
	msg := []byte(req("POST", "/v1/completions", "Content-Type: application/json\r\nUser-Agent: bench\r\n", `{"model":"m","prompt":"hello","max_tokens":8}`))
	quiet := log.New(io.Discard, "", 0)
	for _, side := range []string{"net/http", "h1"} {
		b.Run(side, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			hs := &http.Server{Handler: h, ErrorLog: quiet, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
			var shutdown func(context.Context) error
			if side == "h1" {
				s := &Server{HTTP: hs}
				shutdown = s.Shutdown
				go func() { _ = s.Serve(ln) }()
			} else {
				shutdown = hs.Shutdown
				go func() { _ = hs.Serve(ln) }()
			}
			defer func() { _ = shutdown(context.Background()) }()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
			}
		})
	}
}
