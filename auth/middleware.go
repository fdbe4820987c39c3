package auth

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/policyrouter/policyrouter/api"
)

// ErrorWriter writes an error envelope with the given status, code and
// message. The handlers package passes its error renderer, which adds the
// request ID.
type ErrorWriter func(w http.ResponseWriter, r *http.Request, status int, code, message string)

// Middleware authenticates each request with v and requires scope.
//
//   - No Authorization header, or one with another scheme: 401 with
//     `WWW-Authenticate: Bearer realm="policyrouter"` (RFC 6750 §3.1: no
//     error code when the client sent no bearer credentials).
//   - A malformed header or a token v refuses: 401 with
//     `Bearer realm="policyrouter", error="invalid_token", error_description="..."`.
//   - A valid token without scope: 403 with
//     `Bearer realm="policyrouter", error="insufficient_scope", scope="<scope>"`.
//
// The challenge header is set before onError is called to write the body
// with code api.CodeUnauthorized or api.CodeForbidden. A nil onError writes
// a bare api.ErrorResponse. Messages never contain the token.
//
// On success the claims are in the request context (FromContext). An
// empty scope requires authentication only. If v is nil the middleware
// passes every request through unauthenticated (open mode; the server
// allows it only on a loopback address, see IsLoopbackAddr).
//
// Middleware panics if scope is neither empty nor a known scope: that is a
// mistake in the route table, found when the routes are built.
func Middleware(v *Verifier, scope string, onError ErrorWriter) func(http.Handler) http.Handler {
	if scope != "" && !IsScope(scope) {
		panic("auth: Middleware: unknown scope " + scope)
	}
	if v == nil {
		return func(next http.Handler) http.Handler { return next }
	}
	if onError == nil {
		onError = writeError
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, status := bearerToken(r.Header)
			switch status {
			case tokenMissing:
				w.Header().Set("WWW-Authenticate", `Bearer realm="`+Realm+`"`)
				onError(w, r, http.StatusUnauthorized, api.CodeUnauthorized, "missing bearer token")
				return
			case tokenMalformed:
				unauthorized(w, r, onError, "malformed Authorization header")
				return
			}
			claims, why := v.verify(token)
			if why != "" {
				unauthorized(w, r, onError, why)
				return
			}
			if scope != "" && !claims.Has(scope) {
				w.Header().Set("WWW-Authenticate",
					`Bearer realm="`+Realm+`", error="insufficient_scope", scope="`+scope+`"`)
				onError(w, r, http.StatusForbidden, api.CodeForbidden, "token lacks the "+scope+" scope")
				return
			}
			next.ServeHTTP(w, r.WithContext(NewContext(r.Context(), claims)))
		})
	}
}

func unauthorized(w http.ResponseWriter, r *http.Request, onError ErrorWriter, why string) {
	w.Header().Set("WWW-Authenticate",
		`Bearer realm="`+Realm+`", error="invalid_token", error_description="`+quotable(why)+`"`)
	onError(w, r, http.StatusUnauthorized, api.CodeUnauthorized, "invalid bearer token: "+why)
}

type tokenStatus int

const (
	tokenOK tokenStatus = iota
	tokenMissing
	tokenMalformed
)

// bearerToken extracts the token of an `Authorization: Bearer <token>`
// header. The scheme is case-insensitive (RFC 7235 §2.1). No header, or a
// header of another scheme, is tokenMissing; more than one header, an
// empty token or a token with inner spaces is tokenMalformed.
func bearerToken(h http.Header) (string, tokenStatus) {
	values := h.Values("Authorization")
	switch len(values) {
	case 0:
		return "", tokenMissing
	case 1:
	default:
		return "", tokenMalformed
	}
	scheme, rest, _ := strings.Cut(strings.TrimSpace(values[0]), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", tokenMissing
	}
	token := strings.TrimLeft(rest, " ")
	if token == "" || strings.ContainsAny(token, " \t") {
		return "", tokenMalformed
	}
	return token, tokenOK
}

// quotable keeps the characters RFC 6750 §3 allows in error_description
// (printable ASCII except '"' and '\').
func quotable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return -1
		}
		return r
	}, s)
}

// writeError is the envelope writer used when Middleware gets no onError.
func writeError(w http.ResponseWriter, _ *http.Request, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.ErrorResponse{Error: api.ErrorBody{Code: code, Message: message}})
}
