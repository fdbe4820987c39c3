package auth

import "testing"

func TestIsLoopbackAddr(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:8080", true},
		{"127.0.0.1:0", true},
		{"127.1.2.3:80", true},
		{"127.255.255.255:80", true},
		{"[::1]:8080", true},
		{"[0:0:0:0:0:0:0:1]:8080", true},
		{"[::ffff:127.0.0.1]:8080", true},
		{"localhost:8080", true},
		{"LocalHost:8080", true},

		{"", false},
		{":8080", false},
		{"0.0.0.0:8080", false},
		{"[::]:8080", false},
		{"10.0.0.1:8080", false},
		{"192.168.1.10:8080", false},
		{"128.0.0.1:8080", false},
		{"[::2]:8080", false},
		{"[fe80::1]:8080", false},
		{"example.com:8080", false},
		{"localhost.example.com:8080", false},
		{"notlocalhost:8080", false},
		{"127.0.0.1", false}, // no port: not a listen address
		{"localhost", false},
		{"::1", false},
		{"[::1]", false},
		{" 127.0.0.1:8080", false},
		{"127.0.0.1.nip.io:8080", false},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			if got := IsLoopbackAddr(tt.addr); got != tt.want {
				t.Errorf("IsLoopbackAddr(%q) = %v, want %v", tt.addr, got, tt.want)
			}
		})
	}
}
