package engine_test

import (
	"testing"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/routing"
)

// The pause and resume verbs of a fan-out are recognised from each
// engine's own update steps, whatever query they carry.
func TestVerbOf(t *testing.T) {
	for _, c := range []struct {
		engine, method, path string
		want                 engine.GenerationVerb
	}{
		{engine.SGLang, "POST", "/pause_generation", engine.VerbPause},
		{engine.SGLang, "POST", "/continue_generation", engine.VerbResume},
		{engine.SGLang, "GET", "/pause_generation", engine.VerbOther},
		{engine.SGLang, "POST", "/pause", engine.VerbOther},
		{engine.SGLang, "POST", "/update_weights_from_disk", engine.VerbOther},
		{engine.VLLM, "POST", "/pause?mode=keep", engine.VerbPause},
		{engine.VLLM, "POST", "/pause", engine.VerbPause},
		{engine.VLLM, "POST", "/resume", engine.VerbResume},
		{engine.VLLM, "POST", "/pause_generation", engine.VerbOther},
		{engine.Native, "POST", "/pause", engine.VerbOther},
		{engine.LlamaCpp, "POST", "/pause_generation", engine.VerbOther},
	} {
		p := routing.Policy{Engine: c.engine}
		if got := engine.VerbOf(p, c.method, c.path); got != c.want {
			t.Errorf("VerbOf(%s, %s %s) = %d; want %d", c.engine, c.method, c.path, got, c.want)
		}
	}
	for e, want := range map[string]string{engine.SGLang: "/continue_generation", engine.VLLM: "/resume", engine.Native: ""} {
		if got := engine.ResumePath(routing.Policy{Engine: e}); got != want {
			t.Errorf("ResumePath(%s) = %q; want %q", e, got, want)
		}
	}
}
