package app

import (
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/auth"
)

// --jwt-leeway sets how long after its exp a token is still accepted:
// the default is auth.DefaultLeeway, and 0 allows none, so that a token
// 1 s past its exp is a 401. (auth's tests hold the edges to the second,
// on a fixed clock; here the clock is real, so the tokens keep a margin.)
func TestJWTLeewayFlag(t *testing.T) {
	secret := strings.Repeat("k", 32)
	// pastExp mints a read token whose exp was d ago (to the second below:
	// exp is whole seconds).
	pastExp := func(d time.Duration) string {
		t.Helper()
		const ttl = time.Minute
		at := time.Now().Add(-d - ttl)
		tok, err := auth.Mint(auth.Config{Secret: []byte(secret), Now: func() time.Time { return at }}, "trainer", []string{auth.ScopeRead}, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	tests := []struct {
		name string
		args []string // flags; none takes the default
		tok  string
		want int
	}{
		{"default covers 1s", nil, pastExp(time.Second), http.StatusOK},
		{"default covers 20s", nil, pastExp(20 * time.Second), http.StatusOK},
		{"default not 40s", nil, pastExp(40 * time.Second), http.StatusUnauthorized},
		{"0 not 1s", []string{"--jwt-leeway", "0"}, pastExp(time.Second), http.StatusUnauthorized},
		{"0 takes a live token", []string{"--jwt-leeway", "0"}, pastExp(-time.Minute), http.StatusOK},
		{"5s covers 1s", []string{"--jwt-leeway", "5s"}, pastExp(time.Second), http.StatusOK},
		{"5s not 20s", []string{"--jwt-leeway", "5s"}, pastExp(20 * time.Second), http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			c.RegisterFlags(fs)
			if err := fs.Parse(append([]string{"--jwt-secret", secret, "--addr", "127.0.0.1:0"}, tt.args...)); err != nil {
				t.Fatal(err)
			}
			c.PollInterval = 0
			_, addr := serveApp(t, c)
			req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/stats", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+tt.tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("GET /stats: %d; want %d", resp.StatusCode, tt.want)
			}
		})
	}
}
