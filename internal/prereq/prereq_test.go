package prereq

import (
	"strings"
	"testing"
)

// recorder is a testing.TB that records how the test ended instead of
// ending it.
type recorder struct {
	testing.TB
	failed, skipped string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = format
}

func (r *recorder) Skip(args ...any) {
	r.skipped = "skip"
}

func TestMissingFailsUnderCIAndSkipsElsewhere(t *testing.T) {
	for _, tc := range []struct {
		env        string
		fail, skip bool
	}{
		{env: "1", fail: true},
		{env: "true", fail: true},
		{env: "", skip: true},
	} {
		t.Run("POLICYROUTER_CI="+tc.env, func(t *testing.T) {
			t.Setenv(EnvCI, tc.env)
			r := &recorder{TB: t}
			Missing(r, "curl is not on PATH")
			if got := r.failed != ""; got != tc.fail {
				t.Errorf("failed = %v; want %v", got, tc.fail)
			}
			if got := r.skipped != ""; got != tc.skip {
				t.Errorf("skipped = %v; want %v", got, tc.skip)
			}
		})
	}
}

func TestLookPath(t *testing.T) {
	t.Setenv(EnvCI, "1")
	r := &recorder{TB: t}
	if got := LookPath(r, "go", "install Go"); !strings.HasSuffix(got, "go") || r.failed != "" {
		t.Errorf("LookPath(go) = %q, failed %q", got, r.failed)
	}
	LookPath(r, "no-such-program-policyrouter", "nowhere")
	if r.failed == "" {
		t.Error("a missing program did not fail under CI")
	}
}
