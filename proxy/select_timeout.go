package proxy

import (
	"net/http"
	"strconv"
	"time"
)

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
	v := headerValue(h, canonicalSelectTimeoutMS)
	if v == "" {
		return p.DefaultSelectWait, nil
	}
	ms, err := strconv.Atoi(v)
	if err != nil || ms < 0 || ms > maxSelectTimeoutMS {
		return 0, fieldError(HeaderSelectTimeoutMS, "must be an integer between 0 and "+strconv.Itoa(maxSelectTimeoutMS)+", not "+strconv.Quote(v))
	}
	return min(time.Duration(ms)*time.Millisecond, p.MaxSelectWait), nil
}
