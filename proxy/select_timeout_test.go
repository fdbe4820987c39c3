package proxy

import (
	"bufio"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/routing"
)

// X-Select-Timeout-MS is capped by --max-select-wait; without it the wait
// is the default.
func TestSelectWait(t *testing.T) {
	p := New(Config{MaxSelectWait: 5 * time.Second, DefaultSelectWait: 2 * time.Second})
	for _, tt := range []struct {
		value string
		want  time.Duration
	}{
		{"", 2 * time.Second},
		{"200", 200 * time.Millisecond},
		{"0", 0},
		{"3600000", 5 * time.Second},
	} {
		h := http.Header{}
		if tt.value != "" {
			h.Set(HeaderSelectTimeoutMS, tt.value)
		}
		got, err := p.selectWait(h)
		if err != nil || got != tt.want {
			t.Errorf("%s %q: %v, %v; want %v", HeaderSelectTimeoutMS, tt.value, got, err, tt.want)
		}
	}
	for _, v := range []string{"soon", "-1", "3600001", "1.5"} {
		h := http.Header{}
		h.Set(HeaderSelectTimeoutMS, v)
		var in *routing.InputError
		if _, err := p.selectWait(h); !errors.As(err, &in) || in.Field != HeaderSelectTimeoutMS {
			t.Errorf("%s %q: %v; want an input error naming the header", HeaderSelectTimeoutMS, v, err)
		}
	}
}

// The routing headers are read whatever their case on the wire (httpx
// writes them in lower case): net/http's server canonicalises the names,
// and selectRequest looks them up by their canonical keys.
func TestSelectRequestHeadersAnyCase(t *testing.T) {
	raw := "POST /generate HTTP/1.1\r\nHost: router\r\n" +
		"x-router: idle_affinity\r\nx-env-id: env-3\r\nx-session-id: s-1\r\n" +
		"X-STICKY-WAIT-MS: 40\r\nx-min-weight-version: 7\r\nx-select-timeout-ms: 250\r\n" +
		"Content-Length: 0\r\n\r\n"
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatal(err)
	}
	p := New(Config{MaxSelectWait: 5 * time.Second, DefaultSelectWait: 2 * time.Second, DefaultStickyWait: time.Second})
	req, err := p.selectRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	if req.Router != "idle_affinity" || req.EnvID != "env-3" || req.Session != "s-1" ||
		req.StickyWait != 40*time.Millisecond || req.MinVersion == nil || *req.MinVersion != 7 ||
		req.Wait != 250*time.Millisecond {
		t.Errorf("selectRequest read %+v (min version %v)", req, req.MinVersion)
	}

	// X-SMG-Routing-Key stands in for a missing session id.
	r.Header.Del(HeaderSessionID)
	r.Header["X-Smg-Routing-Key"] = []string{"k-9"}
	if req, err = p.selectRequest(r); err != nil || req.Session != "k-9" {
		t.Errorf("with only x-smg-routing-key: session %q, %v; want k-9", req.Session, err)
	}
}
