package registry

import (
	"net"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/policyrouter/policyrouter/routing"
)

// serverKey is the form of a policy URL that every spelling of one server
// shares, so that registering a server twice under two spellings is seen:
// scheme and host in lower case, the scheme's default port dropped (80 for
// http, 443 for https), any loopback host (localhost, 127.0.0.0/8, ::1,
// in any spelling) written 127.0.0.1, an IP address in its canonical
// form, and the path as cleanPath writes it. Only comparisons use it;
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
	key := scheme + "://" + hostport + cleanPath(u.EscapedPath())
	if u.RawQuery != "" {
		key += "?" + u.RawQuery
	}
	return key
}

// cleanPath is the form of an escaped URL path that every spelling of it
// shares: percent-encoded unreserved characters decoded and the other
// percent-encodings in upper case (RFC 3986 §6.2.2.1–2), then "." and ".."
// segments resolved and empty segments ("//") and a trailing slash
// dropped; the root path is "". Decoding comes first, so "%2E" is a dot
// segment; an encoded slash ("%2F") stays one character of a segment.
func cleanPath(escaped string) string {
	var b strings.Builder
	b.Grow(len(escaped) + 1)
	b.WriteByte('/')
	for i := 0; i < len(escaped); i++ {
		c := escaped[i]
		if c == '%' && i+2 < len(escaped) {
			hi, ok1 := unhex(escaped[i+1])
			lo, ok2 := unhex(escaped[i+2])
			if ok1 && ok2 {
				if d := hi<<4 | lo; unreserved(d) {
					b.WriteByte(d)
				} else {
					b.WriteByte('%')
					b.WriteString(strings.ToUpper(escaped[i+1 : i+3]))
				}
				i += 2
				continue
			}
		}
		b.WriteByte(c)
	}
	p := path.Clean(b.String())
	if p == "/" {
		return ""
	}
	return p
}

// unreserved reports whether c is one of RFC 3986's unreserved characters
// (§2.3): a URL means the same with them encoded or not.
func unreserved(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c == '-' || c == '.' || c == '_' || c == '~'
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// checkURL returns an *routing.InputError naming field when raw's host is
// the unspecified address (0.0.0.0 or ::, in any spelling): the address a
// server listens on to take connections on every interface, which names
// no one server to send to. Other URLs the handlers have checked already.
func checkURL(field, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil && a.Unmap().IsUnspecified() {
		return &routing.InputError{Field: field, Msg: "must name a server one can send to, not the unspecified address " +
			u.Hostname() + " (a server listens on it, on every interface); use 127.0.0.1 for this machine, or the server's own address"}
	}
	return nil
}
