package registry

import "testing"

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
		{"http://a:1/x%2Fy", "http://a:1/x/y", false}, // an escaped slash is not a slash
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
	} {
		if got := serverKey(tt.in); got != tt.want {
			t.Errorf("serverKey(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
