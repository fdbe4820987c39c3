package registry

import (
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// serverKey is the form of a policy URL that every spelling of one server
// shares, so that registering a server twice under two spellings is seen:
// scheme and host in lower case, the scheme's default port dropped (80 for
// http, 443 for https), any loopback host (localhost, 127.0.0.0/8, ::1,
// in any spelling) written 127.0.0.1, an IP address in its canonical
// form, and the path without trailing slashes. Only comparisons use it;
// the stored URL stays as the client wrote it. A URL that does not parse
// as absolute is its own key.
func serverKey(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return raw
	}
	scheme := strings.ToLower(u.Scheme)
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if n, err := strconv.ParseUint(port, 10, 16); err == nil {
		port = strconv.FormatUint(n, 10) // "080" is 80
	}
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap() // ::ffff:127.0.0.1 is 127.0.0.1
		host = a.String()
		if a.IsLoopback() {
			host = "127.0.0.1"
		}
	} else if host == "localhost" || host == "localhost." {
		host = "127.0.0.1"
	}
	hostport := host
	if port != "" {
		hostport = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		hostport = "[" + host + "]"
	}
	key := scheme + "://" + hostport + strings.TrimRight(u.EscapedPath(), "/")
	if u.RawQuery != "" {
		key += "?" + u.RawQuery
	}
	return key
}
