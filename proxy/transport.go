package proxy

import (
	"crypto/tls"
	"net/http"
)

// defaultMaxIdlePerHost is how many idle connections the proxy keeps per
// policy: a batching engine takes tens of requests at once, and with
// http.DefaultTransport's 2 every other request would pay a new one.
const defaultMaxIdlePerHost = 256

// NewTransport is the transport of proxy mode: http.DefaultTransport's
// settings (its dial, TLS handshake and idle timeouts, HTTP/2 towards
// https:// policies, the environment's proxy), keep-alive connections up
// to 256 idle per policy without a bound over all, and tc's TLS towards
// https:// policies (nil: the system's roots). It adds no Accept-Encoding
// of its own: a request goes out with the client's, and an answer comes
// back as the policy sent it, never decompressed on the way.
//
// It never sends a written POST twice: http.Transport sends a request
// again on a new connection only when nothing of it was written, or when
// it is replayable (GET, HEAD, or a request with an Idempotency-Key,
// which the proxy strips in Rewrite).
func NewTransport(tc *tls.Config) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0
	t.MaxIdleConnsPerHost = defaultMaxIdlePerHost
	t.DisableCompression = true
	t.TLSClientConfig = tc
	return t
}
