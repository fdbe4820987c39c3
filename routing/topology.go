package routing

import (
	"encoding/json"
	"fmt"
	"slices"
	"unicode"
)

// MaxIndex bounds a policy index and an env worker id. Indices are dense
// array positions in the routing state, so an unbounded index would let one
// request allocate without limit.
const MaxIndex = 1 << 20

// Topology is the seed's component_distribution: node id -> component
// kind (KindEnv, KindEval) -> ids: the env worker ids and the eval
// (policy) indices placed on that node. It is the one topology type of
// the API, the store and the routers. Its JSON is the API's form,
// {"node-a": {"env": {"ids": [0]}, "eval": {"ids": [0]}}}.
type Topology map[string]map[string][]int

// The component kinds of a topology node: the seed's routers read env
// workers and eval policies, nothing else.
const (
	KindEnv  = "env"
	KindEval = "eval"
)

// Env returns the env worker ids on node.
func (t Topology) Env(node string) []int { return t[node][KindEnv] }

// Eval returns the eval (policy) indices on node.
func (t Topology) Eval(node string) []int { return t[node][KindEval] }

// component is one kind's entry in the API's form of a topology.
type component struct {
	IDs []int `json:"ids"`
}

// MarshalJSON writes the API's form; a nil topology is null, as the
// stores keep it apart from an empty one.
func (t Topology) MarshalJSON() ([]byte, error) {
	if t == nil {
		return []byte("null"), nil
	}
	out := make(map[string]map[string]component, len(t))
	for node, kinds := range t {
		out[node] = make(map[string]component, len(kinds))
		for kind, ids := range kinds {
			out[node][kind] = component{IDs: ids}
		}
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads the API's form, and also the bare id lists
// ({"env": [0, 1]}) of registrations stored by earlier versions. It is
// lenient: the API's strict checks, which name the field at fault, are the
// handlers'.
func (t *Topology) UnmarshalJSON(b []byte) error {
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if raw == nil {
		*t = nil
		return nil
	}
	out := make(Topology, len(raw))
	for node, kinds := range raw {
		out[node] = make(map[string][]int, len(kinds))
		for kind, v := range kinds {
			var ids []int
			if err := json.Unmarshal(v, &ids); err != nil {
				var c component
				if err := json.Unmarshal(v, &c); err != nil {
					return fmt.Errorf("topology.%s.%s: %w", node, kind, err)
				}
				ids = c.IDs
			}
			out[node][kind] = ids
		}
	}
	*t = out
	return nil
}

// InputError reports input the routers cannot accept. Field names the
// offending input the way the HTTP API spells it (for example
// "current_loads" or "topology.node-a.eval.ids"), so that a handler can show
// it to the caller unchanged.
type InputError struct {
	Field string
	Msg   string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Msg }

func inputErr(field, format string, args ...any) *InputError {
	return &InputError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Validate checks the topology on its own: node ids are non-empty, ids are
// in [0, MaxIndex), no env worker or eval index appears twice, and the seed's
// co-location rule holds (a node with env workers has eval workers and vice
// versa). Errors are *InputError naming the node. Nodes are checked in
// sorted order so the same input always reports the same error.
func (t Topology) Validate() error {
	envSeen := make(map[int]string)
	evalSeen := make(map[int]string)
	for _, node := range t.nodeIDs() {
		env, eval := t.Env(node), t.Eval(node)
		if node == "" {
			return inputErr("topology", "node id must not be empty")
		}
		if len(env) > 0 && len(eval) == 0 {
			return inputErr("topology."+node+".eval.ids", "node %q has env workers but no eval workers; they must be on the same node", node)
		}
		if len(eval) > 0 && len(env) == 0 {
			return inputErr("topology."+node+".env.ids", "node %q has eval workers but no env workers; they must be on the same node", node)
		}
		if err := checkIDs(node, KindEnv, env, envSeen); err != nil {
			return err
		}
		if err := checkIDs(node, KindEval, eval, evalSeen); err != nil {
			return err
		}
	}
	return nil
}

func checkIDs(node, kind string, ids []int, seen map[int]string) error {
	field := "topology." + node + "." + kind + ".ids"
	for _, id := range ids {
		if id < 0 || id >= MaxIndex {
			return inputErr(field, "id %d on node %q is out of range [0, %d)", id, node, MaxIndex)
		}
		if other, dup := seen[id]; dup {
			if other == node {
				return inputErr(field, "%s id %d appears twice on node %q", kind, id, node)
			}
			return inputErr(field, "%s id %d is on both node %q and node %q", kind, id, other, node)
		}
		seen[id] = node
	}
	return nil
}

// nodeIDs returns the node ids in sorted order.
func (t Topology) nodeIDs() []string {
	ids := make([]string, 0, len(t))
	for id := range t {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Clone returns a deep copy, so that a snapshot never shares slices with its
// caller. A nil topology stays nil.
func (t Topology) Clone() Topology {
	if t == nil {
		return nil
	}
	out := make(Topology, len(t))
	for node, kinds := range t {
		k := make(map[string][]int, len(kinds))
		for kind, ids := range kinds {
			k[kind] = slices.Clone(ids)
		}
		out[node] = k
	}
	return out
}

// ParseEnvWorker returns the env worker index of an env id the way the seed's
// _parse_env_worker_index does: the text after the last '-' read with
// Python's int() (surrounding whitespace, a leading '+', single underscores
// between digits and any Unicode decimal digits are accepted). ok is false
// where the seed returns None; values too large for the routing tables are
// reported as unknown too, which gives the same routing answer as the seed,
// whose lookup of such a worker finds no node.
func ParseEnvWorker(envID string) (worker int, ok bool) {
	s := envID
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '-' {
			s = s[i+1:]
			break
		}
	}
	if w, ok, plain := parsePlainDigits(s); plain {
		return w, ok
	}
	rs := []rune(s)
	lo, hi := 0, len(rs)
	for lo < hi && isPySpace(rs[lo]) {
		lo++
	}
	for hi > lo && isPySpace(rs[hi-1]) {
		hi--
	}
	rs = rs[lo:hi]
	if len(rs) > 0 && rs[0] == '+' {
		rs = rs[1:]
	}
	if len(rs) == 0 {
		return 0, false
	}
	n := 0
	prevDigit := false
	for _, r := range rs {
		if r == '_' {
			if !prevDigit {
				return 0, false
			}
			prevDigit = false
			continue
		}
		d, isDigit := decimalValue(r)
		if !isDigit {
			return 0, false
		}
		prevDigit = true
		n = n*10 + d
		if n >= MaxIndex {
			n = MaxIndex // keep going to reject malformed tails; value is unknown anyway
		}
	}
	if !prevDigit {
		return 0, false // trailing underscore
	}
	if n >= MaxIndex {
		return 0, false
	}
	return n, true
}

// parsePlainDigits reads s when it is one to seven ASCII digits, the usual
// case, without the general path's conversion to runes. plain is false for
// anything else.
func parsePlainDigits(s string) (worker int, ok, plain bool) {
	if len(s) == 0 || len(s) > 7 { // MaxIndex has 7 digits
		return 0, false, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n < MaxIndex, true
}

// isPySpace reports whether Python's int() skips r as whitespace: among
// ASCII only " \t\n\v\f\r" (int() rejects \x1c-\x1f, although
// str.isspace holds for them), beyond ASCII what str.isspace accepts. Go's
// unicode.IsSpace is exactly that.
func isPySpace(r rune) bool {
	return unicode.IsSpace(r)
}

// decimalValue returns the value of a Unicode decimal digit (category Nd).
// Unicode places decimal digits in contiguous runs of ten starting at zero,
// so the value is the distance from the start of the run, modulo ten.
func decimalValue(r rune) (int, bool) {
	if r >= '0' && r <= '9' {
		return int(r - '0'), true
	}
	if r < 0x80 || !unicode.IsDigit(r) {
		return 0, false
	}
	start := r
	for unicode.IsDigit(start - 1) {
		start--
	}
	return int(r-start) % 10, true
}
