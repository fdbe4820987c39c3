// Package prereq decides what a test does when something it needs from
// outside Go is missing (a program on PATH, Python with httpx, a browser,
// an npm package): on a developer's machine the test skips, saying what to
// install; under CI (POLICYROUTER_CI set, as .ci/run does, which installs
// all of them) it fails, so that a test cannot pass there by not running.
package prereq

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// EnvCI is the environment variable that marks a CI run; any non-empty
// value counts.
const EnvCI = "POLICYROUTER_CI"

// CI reports whether the tests run under CI.
func CI() bool { return os.Getenv(EnvCI) != "" }

// Missing ends the test because something it needs is missing: it fails
// under CI and skips elsewhere. The message says what is missing and how
// to get it.
func Missing(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if CI() {
		tb.Fatalf("%s (required: %s is set)", msg, EnvCI)
	} else {
		tb.Skip(msg)
	}
}

// LookPath returns the path of the program name, or ends the test through
// [Missing] when it is not on PATH; install says how to get it (e.g. "apt-get
// install curl").
func LookPath(tb testing.TB, name, install string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		Missing(tb, "%s is not on PATH (%s): %v", name, install, err)
	}
	return path
}
