package proxy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/policyrouter/policyrouter/routing"
)

// headerValue is h.Get(key) for a key already in canonical form.
func headerValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// selectRequest reads a proxied request's routing headers. The router
// must lease (the proxy counts each policy's requests against its
// capacity): the server's default router when it does, else
// idle_affinity.
func (p *Proxy) selectRequest(r *http.Request) (Request, error) {
	h := r.Header
	name := headerValue(h, canonicalRouter)
	if name == "" {
		name = p.DefaultRouter
		if row, ok := routing.LookupRouter(name); !ok || !row.Leases() {
			name = "idle_affinity"
		}
	}
	row, ok := routing.LookupRouter(name)
	if !ok || !row.Leases() {
		return Request{}, fieldError(HeaderRouter, "must be a router that leases: "+routing.NameList(routing.LeasingRouterNames())+", not "+strconv.Quote(name))
	}
	wait, err := p.selectWait(h)
	if err != nil {
		return Request{}, err
	}
	req := Request{Router: row.Name, EnvID: headerValue(h, canonicalEnvID), Wait: wait}
	if len(req.EnvID) > 256 {
		return req, fieldError(HeaderEnvID, "must be at most 256 bytes")
	}
	req.Session = headerValue(h, canonicalSessionID)
	if req.Session == "" {
		req.Session = headerValue(h, canonicalSMGRoutingKey)
	}
	if err := routing.CheckSession(HeaderSessionID, req.Session); err != nil {
		return req, err
	}
	// X-Sticky-Wait-MS: how long a session waits for its busy home (its
	// cache), as /select's sticky_wait_ms; none means the server's default.
	sticky, err := millis(h, canonicalStickyWaitMS, HeaderStickyWaitMS, p.DefaultStickyWait)
	if err != nil {
		return req, err
	}
	req.StickyWait = min(sticky, req.Wait)
	if v := headerValue(h, canonicalMinWeightVersion); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return req, fieldError(HeaderMinWeightVersion, "must be an integer >= 0, not "+strconv.Quote(v))
		}
		req.MinVersion = &n
	}
	// The lease ends with the request; a TTL only guards against a bug.
	if p.Timeout > 0 {
		req.LeaseTTL = req.Wait + p.Timeout + time.Minute
	}
	return req, nil
}

// HeaderSelectTimeoutMS bounds a proxied request's wait for a policy, as
// timeout_ms bounds a /select: without it the request waits the server's
// default (30 s), which is long for a caller that would rather try again
// or go elsewhere (a floor no policy meets yet, a full fleet).
const HeaderSelectTimeoutMS = "X-Select-Timeout-MS"

// maxSelectTimeoutMS is the largest value the header takes, as
// /select's timeout_ms; larger waits are then capped by --max-select-wait.
const maxSelectTimeoutMS = 3600000

// selectWait is how long a proxied request waits for a policy: its
// X-Select-Timeout-MS capped by --max-select-wait, else the server's
// default wait. A malformed header is a 422 naming it.
func (p *Proxy) selectWait(h http.Header) (time.Duration, error) {
	wait, err := millis(h, canonicalSelectTimeoutMS, HeaderSelectTimeoutMS, p.DefaultSelectWait)
	return min(wait, p.MaxSelectWait), err
}

// millis reads a header of milliseconds from 0 to maxSelectTimeoutMS
// under its canonical key: def when it is absent, a 422 naming it when
// it is malformed.
func millis(h http.Header, key, name string, def time.Duration) (time.Duration, error) {
	v := headerValue(h, key)
	if v == "" {
		return def, nil
	}
	ms, err := strconv.Atoi(v)
	if err != nil || ms < 0 || ms > maxSelectTimeoutMS {
		return 0, fieldError(name, "must be an integer between 0 and "+strconv.Itoa(maxSelectTimeoutMS)+", not "+strconv.Quote(v))
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// onOff reads a header of 0 or 1 under its canonical key: def when it is
// absent, a 422 naming it when it is neither.
func onOff(h http.Header, key, name string, def bool) (bool, error) {
	switch v := headerValue(h, key); v {
	case "":
		return def, nil
	case "0", "1":
		return v == "1", nil
	default:
		return false, fieldError(name, "must be 0 or 1, not "+strconv.Quote(v))
	}
}

// The headers' keys in canonical form (X-Policy-Id), set and read without
// canonicalising them again for each request: http.Header.Get of
// "X-Session-ID" makes the string "X-Session-Id" every time it is called.
var (
	canonicalPolicyIndex   = http.CanonicalHeaderKey(HeaderPolicyIndex)
	canonicalPolicyID      = http.CanonicalHeaderKey(HeaderPolicyID)
	canonicalWeightVersion = http.CanonicalHeaderKey(HeaderWeightVersion)

	canonicalWeightVersions = http.CanonicalHeaderKey(HeaderWeightVersions)

	canonicalRouter           = http.CanonicalHeaderKey(HeaderRouter)
	canonicalEnvID            = http.CanonicalHeaderKey(HeaderEnvID)
	canonicalSessionID        = http.CanonicalHeaderKey(HeaderSessionID)
	canonicalSMGRoutingKey    = http.CanonicalHeaderKey(HeaderSMGRoutingKey)
	canonicalStickyWaitMS     = http.CanonicalHeaderKey(HeaderStickyWaitMS)
	canonicalMinWeightVersion = http.CanonicalHeaderKey(HeaderMinWeightVersion)
	canonicalSelectTimeoutMS  = http.CanonicalHeaderKey(HeaderSelectTimeoutMS)
	canonicalResumeOnAbort    = http.CanonicalHeaderKey(HeaderResumeOnAbort)
)
