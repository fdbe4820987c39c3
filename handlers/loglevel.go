package handlers

import (
	"log/slog"
	"net/http"
)

// requestLevel is the level of the log line of a request answered with
// status, given the level of ordinary requests (Config.RequestLogLevel).
// Expected refusals are ordinary: a 4xx is the caller's to fix, and every
// 503 (no_policies, all_unavailable, no_idle_policy, overloaded,
// not_leader, no_fresh_policy, shutting_down, not_ready,
// store_unavailable) is the router saying "not now" by design. 502 and
// 504 are the policy's fault in proxy mode (upstream_failed,
// upstream_timeout): Warn. Any other 5xx is a fault of the router: Error.
func requestLevel(status int, ordinary slog.Level) slog.Level {
	switch {
	case status < 500, status == http.StatusServiceUnavailable:
		return ordinary
	case status == http.StatusBadGateway, status == http.StatusGatewayTimeout:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}
