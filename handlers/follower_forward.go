package handlers

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/policyrouter/policyrouter/api"
)

// A follower does not poll: what it knows of a policy's engine (its
// state, its first probe) is what the leader publishes, which it does not
// have. The routes whose answers depend on it (registration waits for the
// first probe, the lists show each policy's state, the fleet verbs wait
// for the probes to show what they did and hold the leader's refit lock)
// are therefore answered by the leader: viaLeader forwards them,
// once, with the caller's credentials (the replicas share their token
// keys), and answers the leader's answer. A follower that knows no leader,
// or cannot reach it, answers itself, as before.

// viaLeader forwards the request to the leader on a follower replica that
// knows one, and serves it with next otherwise, or when the leader cannot
// be reached. A request another replica forwarded is served here, never
// forwarded again (no loop while two replicas disagree on the leader).
func (s *Server) viaLeader(next http.Handler) http.Handler {
	if s.Leader == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leading, leader := s.Leader()
		target, err := url.Parse(leader)
		if leading || leader == "" || leader == s.self() || err != nil || r.Header.Get(api.FromFollowerHeader) != "" {
			next.ServeHTTP(w, r)
			return
		}
		// The body is read once and kept, so that the request can still be
		// served here when the leader does not answer.
		var body []byte
		if r.Body != nil && r.Body != http.NoBody {
			// The largest any route takes (PUT /policies); the leader
			// applies each route's own.
			limit := 16 * s.MaxBodyBytes
			body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
			if err != nil {
				s.writeError(w, r, decodeError(err, limit))
				return
			}
		}
		restore := func(req *http.Request) {
			req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		}
		restore(r)
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(target)
				pr.Out.Header.Set(api.FromFollowerHeader, "1")
			},
			Transport: s.peers.Transport,
			ErrorHandler: func(w http.ResponseWriter, in *http.Request, err error) {
				s.logger.WarnContext(r.Context(), "follower: the leader did not answer a forwarded request; answering it here",
					"leader", leader, "method", r.Method, "path", r.URL.Path, "err", err, "request_id", RequestIDFromContext(r.Context()))
				restore(r)
				next.ServeHTTP(w, r)
			},
		}
		rp.ServeHTTP(w, r)
	})
}
