package updates_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/updates"
)

// policies is n registered policies of the given engine.
func policies(n int, eng string) []routing.Policy {
	ps := make([]routing.Policy, n)
	for i := range ps {
		ps[i] = routing.Policy{ID: "p" + strconv.Itoa(i), Index: i, URL: "http://p" + strconv.Itoa(i), Engine: eng}
	}
	return ps
}

func pct(p float64) *float64 { return &p }

// Validate fills in the defaults and resolves a percentage against the
// policies the update is for.
func TestSpecValidateDefaults(t *testing.T) {
	s := updates.NewSpec(3)
	s.Action = &updates.Action{Path: "/load"}
	if err := s.Validate(policies(8, engine.Native)); err != nil {
		t.Fatal(err)
	}
	if s.MaxUnavailable != 1 || s.DrainTimeout != time.Minute || s.PauseMode != engine.PauseWait ||
		s.Action.Method != "POST" || s.Action.Timeout != 10*time.Minute {
		t.Errorf("spec %+v, action %+v; want max_unavailable 1, drain 1m, pause wait, POST with 10m", s, *s.Action)
	}
	for _, tt := range []struct {
		pct  float64
		n    int
		want int
	}{{25, 8, 2}, {100, 8, 8}, {10, 8, 1}, {50, 3, 1}, {100, 0, 1}} {
		s := updates.NewSpec(3)
		s.MaxUnavailablePercent = pct(tt.pct)
		if err := s.Validate(policies(tt.n, engine.Native)); err != nil {
			t.Fatalf("%g%% of %d: %v", tt.pct, tt.n, err)
		}
		if s.MaxUnavailable != tt.want || s.MaxUnavailablePercent != nil {
			t.Errorf("%g%% of %d policies: max_unavailable %d (percent %v); want %d, the percent cleared", tt.pct, tt.n, s.MaxUnavailable, s.MaxUnavailablePercent, tt.want)
		}
	}
}

// Validate refuses what it cannot run, naming the field as the API does.
func TestSpecValidateRefuses(t *testing.T) {
	for _, tt := range []struct {
		name  string
		edit  func(*updates.Spec)
		pols  []routing.Policy
		field string
	}{
		{"negative version", func(s *updates.Spec) { s.Version = -1 }, nil, "version"},
		{"max_unavailable 0", func(s *updates.Spec) { s.MaxUnavailable = 0 }, nil, "max_unavailable"},
		{"0%", func(s *updates.Spec) { s.MaxUnavailablePercent = pct(0) }, nil, "max_unavailable"},
		{"150%", func(s *updates.Spec) { s.MaxUnavailablePercent = pct(150) }, nil, "max_unavailable"},
		{"negative drain timeout", func(s *updates.Spec) { s.DrainTimeout = -time.Second }, nil, "drain_timeout_ms"},
		{"negative per-node floor", func(s *updates.Spec) { s.MinAvailablePerNode = -1 }, nil, "min_available_per_node"},
		{"negative max_failures", func(s *updates.Spec) { s.MaxFailures = -1 }, nil, "max_failures"},
		{"action without a path", func(s *updates.Spec) { s.Action = &updates.Action{Path: "load"} }, nil, "action.path"},
		{"action body not JSON", func(s *updates.Spec) { s.Action = &updates.Action{Path: "/load", Body: []byte("{")} }, nil, "action.body"},
		{"unknown pause mode", func(s *updates.Spec) { s.PauseMode = "pause" }, nil, "pause_mode"},
		{"pause mode vLLM has not", func(s *updates.Spec) { s.PauseMode = engine.PauseRetract }, policies(2, engine.VLLM), "pause_mode"},
		{"pause mode SGLang has not", func(s *updates.Spec) { s.PauseMode = engine.PauseKeep }, policies(2, engine.SGLang), "pause_mode"},
		{"model path vLLM cannot load", func(s *updates.Spec) { s.ModelPath = "/ckpt/3" }, policies(2, engine.VLLM), "model_path"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := updates.NewSpec(3)
			tt.edit(&s)
			err := s.Validate(tt.pols)
			var fe *updates.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Errorf("Validate = %v; want a field error on %s", err, tt.field)
			}
		})
	}
	// The same model path is fine with an action to load the weights.
	s := updates.NewSpec(3)
	s.ModelPath, s.Action = "/ckpt/3", &updates.Action{Path: "/load"}
	if err := s.Validate(policies(2, engine.VLLM)); err != nil {
		t.Errorf("model_path with an action on vLLM: %v", err)
	}
}
