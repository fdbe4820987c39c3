package routing

import (
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// FuzzParseEnvWorker checks ParseEnvWorker on any string: it never panics,
// answers only indices the routing tables hold, agrees with strconv on
// plain ASCII suffixes, and reads back every index it could have been
// given.
func FuzzParseEnvWorker(f *testing.F) {
	for _, s := range []string{"env-0", "env-12", "env", "env-x", "env-", "3", "-3", "env-+3", "env- 3 ",
		"env-1_0", "env-1__0", "env-_1", "env-1_", "env-١٢", "a-b-c-7", "env-99999999999999999999", "env-\x1c3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, env string) {
		w, ok := ParseEnvWorker(env)
		if ok && (w < 0 || w >= MaxIndex) {
			t.Fatalf("ParseEnvWorker(%q) = %d, outside [0, %d)", env, w, MaxIndex)
		}
		suffix := env[strings.LastIndexByte(env, '-')+1:]
		if isASCIIDigits(suffix) {
			n, err := strconv.Atoi(suffix)
			want := err == nil && n < MaxIndex
			if ok != want || (ok && w != n) {
				t.Fatalf("ParseEnvWorker(%q) = %d, %v; strconv says %d, %v", env, w, ok, n, err)
			}
		}
		if !ok {
			if isASCIIDigits(suffix) && len(suffix) < 7 {
				t.Fatalf("ParseEnvWorker(%q) refused a small decimal suffix", env)
			}
			return
		}
		// The index read back from the canonical spelling.
		if w2, ok2 := ParseEnvWorker("env-" + strconv.Itoa(w)); !ok2 || w2 != w {
			t.Fatalf("ParseEnvWorker(env-%d) = %d, %v", w, w2, ok2)
		}
		if strings.ContainsFunc(suffix, func(r rune) bool { return unicode.IsLetter(r) || r == '-' }) {
			t.Fatalf("ParseEnvWorker(%q) = %d, but its suffix has letters", env, w)
		}
	})
}

func isASCIIDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
