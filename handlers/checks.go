package handlers

import (
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
)

// The checks the request tables of requests.go are built from, giving the
// validator's answers in its words. Each returns "" for a good value.

// complaint is one bad field of a request and what is wrong with it.
type complaint struct{ field, msg string }

// complain returns a complaint about field when msg is not "", else nil:
// a good request allocates nothing.
func complain(field, msg string) []complaint {
	if msg == "" {
		return nil
	}
	return []complaint{{field, msg}}
}

// complaintsError renders a request's complaints as one 422 naming every
// bad field, the first in the message, as the validator does; nil when
// there are none.
func complaintsError(cs []complaint) error {
	if len(cs) == 0 {
		return nil
	}
	fields := make(map[string]string, len(cs))
	for _, c := range cs {
		fields[c.field] = c.msg
	}
	return &Error{Code: api.CodeValidationFailed, Message: "invalid request: " + cs[0].field + " " + cs[0].msg, Fields: fields}
}

// intRange checks an optional integer against [lo, hi].
func intRange(p *int, lo, hi int) string {
	switch {
	case p == nil:
		return ""
	case *p < lo:
		return "must be >= " + strconv.Itoa(lo)
	case *p > hi:
		return "must be <= " + strconv.Itoa(hi)
	}
	return ""
}

// maxChars checks that s has at most n characters (runes), as the
// validator counts them.
func maxChars(s string, n int) string {
	if len(s) > n && utf8.RuneCountInString(s) > n {
		return "must have at most " + strconv.Itoa(n) + " entries or characters"
	}
	return ""
}

// checkSession checks a session key with routing.CheckSession, the one
// rule of session keys, and returns its complaint about field.
func checkSession(field, key string) []complaint {
	err := routing.CheckSession(field, key)
	if err == nil {
		return nil
	}
	var in *routing.InputError
	if errors.As(err, &in) {
		return []complaint{{in.Field, in.Msg}}
	}
	return []complaint{{field, err.Error()}}
}

// formatFloat writes a bound as the validator's tags and messages do.
func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// maxEntries checks that a slice has at most n entries.
func maxEntries(length, n int) string {
	if length > n {
		return "must have at most " + strconv.Itoa(n) + " entries or characters"
	}
	return ""
}

// isUUID reports whether s is a UUID in its 36-character text form, any
// case, as the validator's uuid tag accepts.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}
