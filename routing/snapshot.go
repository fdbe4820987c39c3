package routing

import (
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"strconv"
)

// Policy is one registered policy server as the routers see it.
type Policy struct {
	// Index is the seed's policy index: the position the routers answer with.
	Index int
	// ID is the stable identifier given at registration.
	ID string
	// URL is the policy server's base URL.
	URL string
	// NodeID is the node the policy was registered on; empty means the node
	// whose eval ids hold Index in the topology, if any.
	NodeID string
	// Capacity is how many sync requests the policy serves at once; 0 means 1.
	Capacity int
	// Labels are free-form and not used for routing.
	Labels map[string]string
	// Draining stops new work to the policy without removing it.
	Draining bool
	// SleepMarked records that a fleet verb put the policy's engine to
	// sleep (POST /fleet/sleep) and none has woken it since: its probes
	// then answer asleep whatever the engine says, for engines that cannot
	// say it (SGLang). Stored, so that a restarted router and every
	// replica know it.
	SleepMarked bool
	// PauseMarked records that a fleet fan-out paused the policy's
	// engine's generation (POST /fleet/engine with its pause verb) and no
	// resume has been seen since: its probes then answer paused, for
	// engines that cannot say it (SGLang); an engine that reports its pause
	// (vLLM) is believed, and its mark cleared once it says it resumed.
	// Stored, like SleepMarked.
	PauseMarked bool
	// Version is the weight version the policy was registered with; its
	// /idle answers replace it with the version they report.
	Version int64
	// Engine names the kind of server the policy is, and so how it is
	// probed and updated: "policyrouter" (GET /idle), "sglang" or "vllm".
	// Empty means "policyrouter".
	Engine string
	// APIKey and AdminAPIKey are sent to the policy's server as
	// "Authorization: Bearer" on every call the router makes to it: APIKey
	// on probes and proxied requests, AdminAPIKey on the engine's update
	// endpoints (each falls back on the other when empty). They are
	// write-only: stored, never shown in an API answer or a log line (Secret
	// prints as "[redacted]").
	APIKey      Secret
	AdminAPIKey Secret
	// Models are the model ids the policy serves, as registered; empty
	// means those its engine reports (Probe.Models), or, before any
	// report, any model.
	Models []string
}

// Secret is a credential held for a policy. Its String, GoString,
// LogValue and MarshalJSON never show it, so that a policy printed with
// %v, logged by slog or marshalled leaks nothing; Reveal returns it, for
// the Authorization header and the store (which stores it as a string).
type Secret string

// Reveal returns the secret itself.
func (s Secret) Reveal() string { return string(s) }

// String returns "[redacted]", or "" for an empty secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString is String, for %#v.
func (s Secret) GoString() string { return s.String() }

// LogValue is String, for log/slog.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON is String as a JSON string: a policy marshalled (by a JSON
// log handler, say) shows no key.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// BearerFor returns the credential to send on a call of the given kind:
// the admin key for admin calls, else the API key, each falling back on
// the other; "" when the policy has neither.
func (p Policy) BearerFor(admin bool) string {
	first, second := p.APIKey, p.AdminAPIKey
	if admin {
		first, second = second, first
	}
	if first != "" {
		return first.Reveal()
	}
	return second.Reveal()
}

// EngineName is the policy's engine, "policyrouter" when none was named.
func (p Policy) EngineName() string {
	if p.Engine == "" {
		return EnginePolicyrouter
	}
	return p.Engine
}

// EnginePolicyrouter is the engine of policies that serve policyrouter's
// own GET /idle contract, the default.
const EnginePolicyrouter = "policyrouter"

// Clone returns a copy of p that shares nothing with it.
func (p Policy) Clone() Policy {
	p.Labels = maps.Clone(p.Labels)
	return p
}

func (p Policy) capacity() int {
	if p.Capacity <= 0 {
		return 1
	}
	return p.Capacity
}

// Snapshot is an immutable view of the registered policies and the topology,
// with the maps the routers need precomputed. It is rebuilt on every
// registration change and published atomically; readers never lock it.
type Snapshot struct {
	policies []Policy // in index order
	nodes    []string // effective node per position, "" for none
	rts      []*policyRuntime
	posOf    map[int]int // index -> position
	// dense is posOf as a slice (-1: no policy) when the indices are
	// compact enough, as they are when a fleet numbers its policies from 0:
	// /assign resolves an index per task.
	dense    []int32
	byID     map[string]int // id -> position
	topology Topology
	envNode  map[int]string // env worker -> node
	// evalPos lists, per node with eval workers, the positions of its eval
	// policies in topology order: the seed's _node_to_eval_policies.
	evalPos map[string][]int
	// replaced is closed when a newer snapshot is published.
	replaced chan struct{}
	// sticky holds the session rings, built on first use.
	sticky stickyRings
}

// Replaced returns a channel that is closed once a newer snapshot has been
// published, so that a reader (the poller) can wait for registration
// changes instead of checking for them.
func (s *Snapshot) Replaced() <-chan struct{} { return s.replaced }

// newSnapshot validates policies and topology together and builds the
// lookup tables. It returns an *InputError for a malformed policy set or
// topology, or for a topology that names an eval index no policy has.
func newSnapshot(policies []Policy, topo Topology) (*Snapshot, error) {
	if err := topo.Validate(); err != nil {
		return nil, err
	}
	s := &Snapshot{
		policies: slices.Clone(policies),
		posOf:    make(map[int]int, len(policies)),
		byID:     make(map[string]int, len(policies)),
		topology: topo.Clone(),
		envNode:  make(map[int]string),
		evalPos:  make(map[string][]int),
		replaced: make(chan struct{}),
	}
	slices.SortFunc(s.policies, func(a, b Policy) int { return a.Index - b.Index })
	for pos, p := range s.policies {
		field := "policies[" + strconv.Itoa(pos) + "]"
		switch {
		case p.Index < 0 || p.Index >= MaxIndex:
			return nil, inputErr(field+".index", "must be between 0 and %d", MaxIndex-1)
		case p.ID == "":
			return nil, inputErr(field+".id", "must not be empty")
		case p.Capacity < 0:
			return nil, inputErr(field+".capacity", "must be >= 0")
		}
		if _, dup := s.posOf[p.Index]; dup {
			return nil, inputErr(field+".index", "index %d is registered twice", p.Index)
		}
		if _, dup := s.byID[p.ID]; dup {
			return nil, inputErr(field+".id", "id %q is registered twice", p.ID)
		}
		s.posOf[p.Index] = pos
		s.byID[p.ID] = pos
		s.policies[pos].Labels = maps.Clone(p.Labels)
	}

	evalNode := make(map[int]string)
	for _, node := range s.topology.nodeIDs() {
		for _, e := range s.topology.Env(node) {
			s.envNode[e] = node
		}
		for _, idx := range s.topology.Eval(node) {
			pos, ok := s.posOf[idx]
			if !ok {
				return nil, inputErr("topology."+node+".eval.ids", "eval id %d on node %q is not a registered policy index", idx, node)
			}
			evalNode[idx] = node
			s.evalPos[node] = append(s.evalPos[node], pos)
		}
	}
	if n := len(s.policies); n > 0 && s.policies[n-1].Index < 2*n+64 {
		s.dense = make([]int32, s.policies[n-1].Index+1)
		for i := range s.dense {
			s.dense[i] = -1
		}
		for pos, p := range s.policies {
			s.dense[p.Index] = int32(pos)
		}
	}
	s.nodes = make([]string, len(s.policies))
	for pos, p := range s.policies {
		node := p.NodeID
		if node == "" {
			node = evalNode[p.Index]
		}
		s.nodes[pos] = node
	}
	return s, nil
}

// Policies returns the registered policies in index order. The slice is
// shared and must not be modified.
func (s *Snapshot) Policies() []Policy { return s.policies }

// Topology returns the topology. It is shared and must not be modified.
func (s *Snapshot) Topology() Topology { return s.topology }

// Node returns the effective node of the policy at position pos: its
// registered node id, else the topology node whose eval ids hold its index.
func (s *Snapshot) Node(pos int) string { return s.nodes[pos] }

// ByIndex returns the position of the policy with the given index.
func (s *Snapshot) ByIndex(index int) (pos int, ok bool) {
	if s.dense != nil {
		if uint(index) >= uint(len(s.dense)) || s.dense[index] < 0 {
			return 0, false
		}
		return int(s.dense[index]), true
	}
	pos, ok = s.posOf[index]
	return pos, ok
}

// ByID returns the position of the policy with the given id.
func (s *Snapshot) ByID(id string) (pos int, ok bool) {
	pos, ok = s.byID[id]
	return pos, ok
}

// EnvNode returns the node of an env id's worker, or "" when the env id has
// no worker index or the worker is on no node.
func (s *Snapshot) EnvNode(envID string) string {
	if w, ok := ParseEnvWorker(envID); ok {
		return s.envNode[w]
	}
	return ""
}
