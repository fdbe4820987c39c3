package auth

import (
	"net"
	"net/netip"
	"strings"
)

// IsLoopbackAddr reports whether the listen address addr ("host:port")
// binds to a loopback interface only: a host in 127.0.0.0/8, ::1 (also
// written in full or as an IPv4-mapped loopback address), or "localhost"
// (any case). It is false for an empty host (":8080", which binds every
// interface), unspecified addresses ("0.0.0.0:8080", "[::]:8080"), any
// other name or address, and anything that is not host:port, "" included.
//
// "localhost" is trusted to resolve to loopback, as RFC 6761 §6.3 says it
// should; a caller that distrusts the local resolver can resolve it first.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	return ip.Unmap().IsLoopback()
}
