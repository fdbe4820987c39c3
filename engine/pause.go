package engine

import (
	"net/http"
	"strings"

	"github.com/policyrouter/policyrouter/routing"
)

// GenerationVerb is what an engine-native call sent through a fleet
// fan-out (POST /fleet/engine/{path}) does to the engine's generation:
// pause it, resume it, or neither.
type GenerationVerb int

const (
	// VerbOther is any other call.
	VerbOther GenerationVerb = iota
	// VerbPause is the engine's pause: the same endpoint as its update
	// step Pause (SGLang POST /pause_generation, vLLM POST /pause).
	VerbPause
	// VerbResume is the engine's resume: the endpoint of its update step
	// Resume (SGLang POST /continue_generation, vLLM POST /resume).
	VerbResume
)

// VerbOf classifies the call method path (a query, if any, is not
// compared: vLLM's pause takes its mode there) for p's engine, from the
// engine's own update steps, so that no path of an engine is named
// outside this package. An engine without pause and resume has none.
func VerbOf(p routing.Policy, method, path string) GenerationVerb {
	if method != http.MethodPost {
		return VerbOther
	}
	e := Of(p)
	path, _, _ = strings.Cut(path, "?")
	if c, ok := e.Pause(PauseAbort); ok && callPath(c) == path {
		return VerbPause
	}
	if c, ok := e.Resume(); ok && c.Method == method && callPath(c) == path {
		return VerbResume
	}
	return VerbOther
}

// ResumePath is the path of the call that resumes p's engine, for
// messages; "" for an engine without one.
func ResumePath(p routing.Policy) string {
	if c, ok := Of(p).Resume(); ok {
		return callPath(c)
	}
	return ""
}

func callPath(c Call) string {
	path, _, _ := strings.Cut(c.Path, "?")
	return path
}

// pauseReporter is an engine whose probe reads the paused state from the
// server itself, when the server answers it.
type pauseReporter interface {
	PauseReported(s *Server) bool
}

// pauseReported says whether e's probe of s reports the pause itself: its
// report then wins over the fleet verbs' record (Policy.PauseMarked).
func pauseReported(e Engine, s *Server) bool {
	r, ok := e.(pauseReporter)
	return ok && r.PauseReported(s)
}

// PauseReported: vLLM's GET /is_paused, unless the server answered it
// 404 (not in dev mode, or older).
func (vllm) PauseReported(s *Server) bool { return !s.noPauseInfo.Load() }

var _ pauseReporter = vllm{}
