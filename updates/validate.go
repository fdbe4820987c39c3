package updates

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/routing"
)

// Defaults of what an update leaves out (NewSpec, Validate).
const (
	DefaultMaxUnavailable = 1
	DefaultDrainTimeout   = time.Minute
	// DefaultActionTimeout bounds an action that sets no timeout: loading
	// a checkpoint can take minutes.
	DefaultActionTimeout = 10 * time.Minute
)

// FieldError is a field of a Spec that Validate refuses, named as the
// HTTP API spells it ("max_unavailable", "action.body").
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return "update: " + e.Field + " " + e.Msg }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// NewSpec returns the spec of an update to version with the defaults of
// what a caller may leave out: MaxUnavailable DefaultMaxUnavailable and
// DrainTimeout DefaultDrainTimeout. The other fields' zero values are
// their defaults, filled in by Validate where they need one.
func NewSpec(version int64) Spec {
	return Spec{Version: version, MaxUnavailable: DefaultMaxUnavailable, DrainTimeout: DefaultDrainTimeout}
}

// Validate checks s for an update of pols, the registered policies it is
// for, and fills in what it leaves to them or to a default:
// MaxUnavailablePercent becomes MaxUnavailable, that percentage of pols
// rounded down but at least 1; PauseMode "" becomes engine.PauseWait; an
// action without a method is a POST, one without a timeout gets
// DefaultActionTimeout. It refuses with a *FieldError a value out of
// range, an action body that is not JSON, a pause mode an engine of pols
// has not got, and a model path an engine of pols cannot load (unless an
// action loads the weights instead).
func (s *Spec) Validate(pols []routing.Policy) error {
	if s.Version < 0 {
		return fieldErr("version", "must be >= 0")
	}
	if pct := s.MaxUnavailablePercent; pct != nil {
		if *pct <= 0 || *pct > 100 || math.IsNaN(*pct) {
			return fieldErr("max_unavailable", "must be a percentage above 0%% and at most 100%%, not %s", strconv.Quote(strconv.FormatFloat(*pct, 'g', -1, 64)+"%"))
		}
		s.MaxUnavailable = max(int(math.Floor(*pct*float64(len(pols))/100)), 1)
		s.MaxUnavailablePercent = nil
	}
	switch {
	case s.MaxUnavailable < 1:
		return fieldErr("max_unavailable", "must be >= 1, or a percentage such as \"25%%\"")
	case s.MinAvailablePerNode < 0:
		return fieldErr("min_available_per_node", "must be >= 0")
	case s.DrainTimeout < 0:
		return fieldErr("drain_timeout_ms", "must be >= 0")
	case s.MaxFailures < 0:
		return fieldErr("max_failures", "must be >= 0")
	case s.PhaseTimeout < 0:
		return fieldErr("phase_timeout_ms", "must be >= 1")
	}
	if a := s.Action; a != nil {
		if a.Method == "" {
			a.Method = http.MethodPost
		}
		if a.Timeout == 0 {
			a.Timeout = DefaultActionTimeout
		}
		switch {
		case !strings.HasPrefix(a.Path, "/"):
			return fieldErr("action.path", "must start with /")
		case a.Timeout < 0:
			return fieldErr("action.timeout_ms", "must be >= 1")
		case len(a.Body) > 0 && !json.Valid(a.Body):
			return fieldErr("action.body", "must be JSON")
		}
	}
	return s.checkEngines(pols)
}

// checkEngines sets the default pause mode and refuses what an engine of
// one of pols cannot do: a pause mode it has not got, or a model path it
// cannot load (without an action to fall back on).
func (s *Spec) checkEngines(pols []routing.Policy) error {
	if s.PauseMode == "" {
		s.PauseMode = engine.PauseWait
	}
	if !slices.Contains(engine.PauseModes, s.PauseMode) {
		return fieldErr("pause_mode", "must be one of %s", strings.Join(engine.PauseModes, ", "))
	}
	seen := map[string]bool{}
	for _, p := range pols {
		name := p.EngineName()
		if seen[name] {
			continue
		}
		seen[name] = true
		steps, ok := engine.Lookup(name)
		if !ok {
			continue
		}
		if modes := steps.PauseModes(); !slices.Contains(modes, s.PauseMode) {
			return fieldErr("pause_mode", "engine %s (policy %d) has no pause mode %q; it takes %s", name, p.Index, s.PauseMode, strings.Join(modes, ", "))
		}
		if _, disk := steps.LoadFromDisk(s.ModelPath, ""); s.ModelPath != "" && !disk && s.Action == nil {
			return fieldErr("model_path", "engine %s (policy %d) cannot load weights from disk: leave model_path out and move the weights yourself (external mode), or give an action", name, p.Index)
		}
	}
	return nil
}
