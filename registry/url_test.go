package registry

import (
	"errors"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/routing"
)

// Two spellings of one server share a key; two servers never do.
func TestServerKey(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		same bool
	}{
		{"http://a:1/p/0", "http://a:1/p/0/", true},
		{"http://a:1", "http://a:1/", true},
		{"http://a:1/p/0", "http://a:1/p/0//", true},
		{"HTTP://Host.Example:1/p", "http://host.example:1/p", true},
		{"http://a:80/p", "http://a/p", true},
		{"http://a:080/p", "http://a/p", true},
		{"https://a:443", "https://a", true},
		{"http://a:443", "http://a", false},
		{"https://a:80", "https://a", false},
		{"http://localhost:9000/p/0", "http://127.0.0.1:9000/p/0", true},
		{"http://LOCALHOST:9000", "http://[::1]:9000", true},
		{"http://[::1]:9000/", "http://127.0.0.1:9000", true},
		{"http://[0:0:0:0:0:0:0:1]:9000", "http://localhost:9000", true},
		{"http://[::ffff:127.0.0.1]:9000", "http://localhost:9000", true},
		{"http://127.0.0.2:9000", "http://localhost:9000", true}, // all of 127.0.0.0/8 is loopback
		{"http://localhost", "http://127.0.0.1:80", true},
		{"http://[2001:DB8::1]:9000", "http://[2001:db8:0::1]:9000", true},
		{"http://[2001:db8::1]", "http://[2001:db8::1]:80/", true},
		{"http://a:1/p/0", "http://a:1/p/1", false},
		{"http://a:1/P", "http://a:1/p", false}, // paths are case-sensitive
		{"http://a:1", "http://a:2", false},
		{"http://a:1", "https://a:1", false},
		{"http://localhost:9000", "http://localhost:9001", false},
		{"http://10.0.0.1:9000", "http://127.0.0.1:9000", false},
		{"http://a:1/x%2Fy", "http://a:1/x/y", false},  // an escaped slash is not a slash
		{"http://a:1/x%2fy", "http://a:1/x%2Fy", true}, // hex digits in either case
		// The path, cleaned: empty segments, dot segments.
		{"http://127.0.0.1:9000//p/0", "http://127.0.0.1:9000/p/0", true},
		{"http://127.0.0.1:9000/p//0", "http://127.0.0.1:9000/p/0", true},
		{"http://127.0.0.1:9000/p/./0", "http://127.0.0.1:9000/p/0", true},
		{"http://127.0.0.1:9000/p/q/../0", "http://127.0.0.1:9000/p/0", true},
		{"http://127.0.0.1:9000/../p/0", "http://127.0.0.1:9000/p/0", true},
		{"http://127.0.0.1:9000/./", "http://127.0.0.1:9000", true},
		{"http://127.0.0.1:9000/p/..", "http://127.0.0.1:9000/", true},
		{"http://127.0.0.1:9000/p/...", "http://127.0.0.1:9000/p", false}, // "..." is a name
		// Unreserved characters, percent-encoded or not (RFC 3986 §6.2.2.2).
		{"http://127.0.0.1:9000/p/%30", "http://127.0.0.1:9000/p/0", true},
		{"http://a:1/%70/%7e%2D%5F%2e", "http://a:1/p/~-_.", true},
		{"http://a:1/p/%2E/0", "http://a:1/p/0", true},  // an encoded dot segment is a dot segment
		{"http://a:1/p/%2E%2E/0", "http://a:1/0", true}, // and so are two
		{"http://a:1/p/%41", "http://a:1/p/a", false},   // %41 is A, and paths are case-sensitive
		{"http://a:1/p%3A0", "http://a:1/p:0", false},   // ":" is reserved: encoded, it is another name
		{"http://a:1/p/%C3%A9", "http://a:1/p/é", true}, // Go escapes what is not ASCII
		{"http://a:1/p%", "http://a:1/p%25", false},     // not an escape: the key is the URL itself
		// Every spelling at once.
		{"HTTP://LOCALHOST:9000//p/./q/../%30/", "http://127.0.0.1:9000/p/0", true},
	} {
		ka, kb := serverKey(tt.a), serverKey(tt.b)
		if (ka == kb) != tt.same {
			t.Errorf("serverKey(%q) = %q, serverKey(%q) = %q; same = %v, want %v", tt.a, ka, tt.b, kb, ka == kb, tt.same)
		}
	}
}

// The key is readable: what the spellings above share.
func TestServerKeyForm(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"HTTP://LocalHost:80/p/0/", "http://127.0.0.1/p/0"},
		{"https://[::1]:8443", "https://127.0.0.1:8443"},
		{"http://[2001:DB8::1]/", "http://[2001:db8::1]"},
		{"http://[2001:db8::1]:9000", "http://[2001:db8::1]:9000"},
		{"not a url", "not a url"},
		{"http://a:1//p/./%30/../%31/", "http://a:1/p/1"},
		{"http://a:1/%7e%2f%c3%a9", "http://a:1/~%2F%C3%A9"},
	} {
		if got := serverKey(tt.in); got != tt.want {
			t.Errorf("serverKey(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// The unspecified address names no server to send to; every other host
// passes.
func TestCheckURL(t *testing.T) {
	for _, tt := range []struct {
		url string
		ok  bool
	}{
		{"http://0.0.0.0:9000/p/0", false},
		{"http://0.0.0.0", false},
		{"https://[::]:9000", false},
		{"http://[0:0:0:0:0:0:0:0]:9000", false},
		{"http://[::ffff:0.0.0.0]:9000", false},
		{"http://127.0.0.1:9000/p/0", true},
		{"http://[::1]:9000", true},
		{"http://localhost:9000", true},
		{"http://engine-0:9000", true},
	} {
		err := checkURL("policies[2].url", tt.url)
		if tt.ok {
			if err != nil {
				t.Errorf("checkURL(%q) = %v; want nil", tt.url, err)
			}
			continue
		}
		var in *routing.InputError
		if !errors.As(err, &in) || in.Field != "policies[2].url" || !strings.Contains(in.Msg, "unspecified address") {
			t.Errorf("checkURL(%q) = %v; want an InputError on policies[2].url about the unspecified address", tt.url, err)
		}
	}
}
