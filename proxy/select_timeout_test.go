package proxy

import (
	"errors"
	"net/http"
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
