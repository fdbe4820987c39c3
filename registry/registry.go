// Package registry keeps the store and the routing state in step: every
// registration change is validated against the routing rules, made durable
// in the store, and only then published to the routers.
package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/store"
)

// Errors returned by Registry, beside *routing.InputError for invalid
// input and the store's own errors.
var (
	// ErrConflict: the change contradicts an existing registration.
	ErrConflict = errors.New("conflict")
	// ErrNotFound: no policy has the given id.
	ErrNotFound = errors.New("not found")
)

// ConflictError is an ErrConflict about one input field: the handlers
// answer it 409 with Field named in the envelope's fields.
type ConflictError struct {
	Field string // JSON path, e.g. "url" or "policies[2].url"
	Msg   string // what is wrong with it, after its name
}

func (e *ConflictError) Error() string { return ErrConflict.Error() + ": " + e.Field + " " + e.Msg }

// Unwrap makes errors.Is(err, ErrConflict) hold.
func (e *ConflictError) Unwrap() error { return ErrConflict }

// Spec is a registration request. Nil Index means the lowest free index,
// empty ID a new UUID, nil Capacity 1.
type Spec struct {
	URL      string
	NodeID   string
	Index    *int
	ID       string
	Capacity *int
	Labels   map[string]string
	// Version is the policy's weight version at registration; nil means 0,
	// or, for a policy already registered, the version it has.
	Version *int64
	// AllowSharedURL registers the policy even when another index has the
	// same URL, in any spelling (serverKey): one server serving as two
	// policies.
	AllowSharedURL bool
	// Engine is the kind of server: empty means the registry's default
	// engine (SetDefaultEngine), resolved at registration and stored.
	Engine string
	// APIKey and AdminAPIKey are the policy's write-only credentials. Nil
	// keeps the key of the policy already registered with the same id (a
	// client that read the registration, which never shows keys, and sends
	// it back loses none); "" removes it.
	APIKey      *string
	AdminAPIKey *string
	// Models are the model ids the policy serves; nil: those its engine
	// reports.
	Models []string
}

// Registry serialises registration changes. It is safe for concurrent use.
type Registry struct {
	store store.Store
	state *routing.State
	newID func() string

	mu            sync.Mutex
	cur           store.Registration // what the store holds; guarded by mu
	defaultEngine string             // guarded by mu
}

// SetDefaultEngine sets the engine of registrations that name none
// (--default-engine); the empty string means routing.EnginePolicyrouter.
// Policies registered before keep theirs.
func (r *Registry) SetDefaultEngine(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.defaultEngine = name
}

// ResolveEngine returns the engine a registration naming engine gets:
// engine itself, or the default engine when it is empty.
func (r *Registry) ResolveEngine(engine string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.engineOfLocked(Spec{Engine: engine})
}

// engineOfLocked resolves spec's engine. Caller must hold mu.
func (r *Registry) engineOfLocked(spec Spec) string {
	switch {
	case spec.Engine != "":
		return spec.Engine
	case r.defaultEngine != "":
		return r.defaultEngine
	}
	return routing.EnginePolicyrouter
}

// Open loads the registration from st and publishes it to state.
func Open(ctx context.Context, st store.Store, state *routing.State) (*Registry, error) {
	reg, err := st.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("registry: load: %w", err)
	}
	return OpenLoaded(st, state, reg)
}

// OpenLoaded is Open on a registration the caller has already loaded from
// st, so that start-up reads the store once (the rolling updates' documents
// in reg are left to the caller).
func OpenLoaded(st store.Store, state *routing.State, reg store.Registration) (*Registry, error) {
	reg.Updates = nil
	r := &Registry{store: st, state: state, newID: uuid.NewString, cur: reg}
	if err := r.publishLocked(reg); err != nil {
		return nil, fmt.Errorf("registry: stored registration is invalid: %w", err)
	}
	return r, nil
}

// WarnSharedServers logs a warning for each server that several
// registered policies name, by serverKey: each of them takes its capacity
// there, so the server may get more requests than it can run at once.
// They were registered with allow_shared_url, or by a version that
// compared fewer spellings of a URL (a stored registration still loads
// as it is). Start-up calls it once, after Open.
func (r *Registry) WarnSharedServers(logger *slog.Logger) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byServer := make(map[string][]routing.Policy)
	var servers []string
	for _, p := range r.cur.Policies {
		key := serverKey(p.URL)
		if byServer[key] == nil {
			servers = append(servers, key)
		}
		byServer[key] = append(byServer[key], p)
	}
	for _, key := range servers {
		ps := byServer[key]
		if len(ps) < 2 {
			continue
		}
		policies := make([]string, len(ps))
		for i, p := range ps {
			policies[i] = fmt.Sprintf("%d (id %q, url %q)", p.Index, p.ID, p.URL)
		}
		logger.Warn("several policies name one server; each takes its capacity there. Registered with allow_shared_url, "+
			"or before every spelling of a URL was compared; to keep one, DELETE /policies/{id} the others",
			"server", key, "policies", strings.Join(policies, ", "))
	}
}

// Current returns the registration: policies in index order and topology.
// The result is a copy.
func (r *Registry) Current() store.Registration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := store.Registration{Topology: r.cur.Topology.Clone(), Policies: make([]routing.Policy, len(r.cur.Policies))}
	for i, p := range r.cur.Policies {
		out.Policies[i] = p.Clone()
	}
	return out
}

// Get returns the policy with the given id.
func (r *Registry) Get(id string) (routing.Policy, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := r.findLocked(id)
	if i < 0 {
		return routing.Policy{}, ErrNotFound
	}
	return r.cur.Policies[i].Clone(), nil
}

func (r *Registry) findLocked(id string) int {
	return slices.IndexFunc(r.cur.Policies, func(p routing.Policy) bool { return p.ID == id })
}

// Register adds one policy. Registering the same index (or id) again with
// the same body is idempotent and returns created=false; a different body
// for a taken index or id is ErrConflict, and so is a URL that names the
// server of a registered policy in any spelling (serverKey), unless
// spec.AllowSharedURL: a *ConflictError naming url and that policy. A URL
// whose host is the unspecified address (0.0.0.0, ::) is a
// *routing.InputError naming url.
func (r *Registry) Register(ctx context.Context, spec Spec) (p routing.Policy, created bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := checkURL("url", spec.URL); err != nil {
		return routing.Policy{}, false, err
	}
	err = r.applyLocked(ctx, func() (*store.Change, error) {
		existing, ok, err := r.sameAsLocked(spec)
		if ok || err != nil {
			p, created = existing, false
			return nil, err
		}
		if !spec.AllowSharedURL {
			key := serverKey(spec.URL)
			for _, other := range r.cur.Policies {
				if serverKey(other.URL) == key {
					return nil, &ConflictError{Field: "url", Msg: fmt.Sprintf("%q %s policy %q at index %d; "+
						"set allow_shared_url to register one server twice", spec.URL, isTheURLOf(spec.URL, other.URL), other.ID, other.Index)}
				}
			}
		}
		p, created = r.fromSpec(spec, r.lowestFreeLocked(nil)), true
		if err := r.checkLocked(append(slices.Clone(r.cur.Policies), p), r.cur.Topology); err != nil {
			return nil, err
		}
		return &store.Change{Put: []routing.Policy{p}}, nil
	})
	if err != nil {
		return routing.Policy{}, false, err
	}
	return p.Clone(), created, nil
}

// sameAsLocked finds a registration spec names by index or id. It returns
// the stored policy and true when spec repeats it, ErrConflict when spec
// differs from it, and false when spec names nothing registered.
func (r *Registry) sameAsLocked(spec Spec) (routing.Policy, bool, error) {
	for _, p := range r.cur.Policies {
		byIndex := spec.Index != nil && *spec.Index == p.Index
		byID := spec.ID != "" && spec.ID == p.ID
		if !byIndex && !byID {
			continue
		}
		diff := bodyDiff(p, spec, r.engineOfLocked(spec))
		switch {
		case spec.ID != "" && !byID:
			diff = fmt.Sprintf("id (registered %q, sent %q)", p.ID, spec.ID)
		case spec.Index != nil && !byIndex:
			diff = fmt.Sprintf("index (registered %d, sent %d)", p.Index, *spec.Index)
		}
		if diff == "" {
			return p.Clone(), true, nil
		}
		what := fmt.Sprintf("index %d is registered to policy %q", p.Index, p.ID)
		if !byIndex {
			what = fmt.Sprintf("id %q is registered at index %d", p.ID, p.Index)
		}
		return routing.Policy{}, false, fmt.Errorf("%w: %s, with a different %s; DELETE /policies/%s first, or replace the whole set with PUT /policies or PUT /registration",
			ErrConflict, what, diff, p.ID)
	}
	return routing.Policy{}, false, nil
}

// bodyDiff names the first field in which spec (whose engine resolves to
// engine) differs from the registered p, with both values (but never a
// key's), or returns "" when it repeats it. A nil key repeats any.
func bodyDiff(p routing.Policy, spec Spec, engine string) string {
	capacity := 1
	if spec.Capacity != nil {
		capacity = *spec.Capacity
	}
	switch {
	case p.URL != spec.URL:
		return fmt.Sprintf("url (registered %q, sent %q)", p.URL, spec.URL)
	case p.NodeID != spec.NodeID:
		return fmt.Sprintf("node_id (registered %q, sent %q)", p.NodeID, spec.NodeID)
	case p.Capacity != capacity:
		return fmt.Sprintf("capacity (registered %d, sent %d)", p.Capacity, capacity)
	case !maps.Equal(p.Labels, spec.Labels):
		return "labels"
	case p.EngineName() != engine:
		return fmt.Sprintf("engine (registered %q, sent %q)", p.EngineName(), engine)
	case !slices.Equal(p.Models, spec.Models):
		return "models"
	case spec.APIKey != nil && p.APIKey.Reveal() != *spec.APIKey:
		return "api_key"
	case spec.AdminAPIKey != nil && p.AdminAPIKey.Reveal() != *spec.AdminAPIKey:
		return "admin_api_key"
	}
	return ""
}

func (r *Registry) fromSpec(spec Spec, freeIndex int) routing.Policy {
	p := routing.Policy{URL: spec.URL, NodeID: spec.NodeID, ID: spec.ID, Capacity: 1, Labels: maps.Clone(spec.Labels), Index: freeIndex}
	if spec.Index != nil {
		p.Index = *spec.Index
	}
	if p.ID == "" {
		p.ID = r.newID()
	}
	if spec.Capacity != nil {
		p.Capacity = *spec.Capacity
	}
	if spec.Version != nil {
		p.Version = *spec.Version
	}
	p.Engine = r.engineOfLocked(spec)
	p.Models = slices.Clone(spec.Models)
	if spec.APIKey != nil {
		p.APIKey = routing.Secret(*spec.APIKey)
	}
	if spec.AdminAPIKey != nil {
		p.AdminAPIKey = routing.Secret(*spec.AdminAPIKey)
	}
	return p
}

// lowestFreeLocked returns the lowest index not registered and not in taken.
func (r *Registry) lowestFreeLocked(taken map[int]bool) int {
	used := make(map[int]bool, len(r.cur.Policies))
	for _, p := range r.cur.Policies {
		used[p.Index] = true
	}
	for i := 0; ; i++ {
		if !used[i] && !taken[i] {
			return i
		}
	}
}

// Replace replaces every registered policy at once and keeps the
// topology. A spec without an id keeps the id of the policy registered at
// the same index with the same URL, so that a trainer re-sending its set at
// start-up keeps the live state (loads, leases) of its policies; drain
// flags stay with their ids, and asleep records with their ids while their
// URL and engine stay the same. Removing a policy the topology names as an
// eval worker is ErrConflict: PUT /registration changes both at once.
func (r *Registry) Replace(ctx context.Context, specs []Spec) ([]routing.Policy, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var next []routing.Policy
	err := r.applyLocked(ctx, func() (*store.Change, error) {
		var err error
		if next, err = r.planLocked(specs); err != nil {
			return nil, err
		}
		if err := evalsRegistered(next, r.cur.Topology); err != nil {
			return nil, err
		}
		if err := r.checkLocked(next, r.cur.Topology); err != nil {
			return nil, err
		}
		return &store.Change{Put: next, ReplacePolicies: true}, nil
	})
	if err != nil {
		return nil, err
	}
	return clonePolicies(next), nil
}

// ReplaceRegistration replaces every policy and the topology in one durable
// write, checked as a whole: what a trainer does at start-up, and how to
// shrink or reshape a fleet the topology describes.
func (r *Registry) ReplaceRegistration(ctx context.Context, specs []Spec, t routing.Topology) (store.Registration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var next []routing.Policy
	t = t.Clone()
	err := r.applyLocked(ctx, func() (*store.Change, error) {
		var err error
		if next, err = r.planLocked(specs); err != nil {
			return nil, err
		}
		if err := r.checkLocked(next, t); err != nil {
			return nil, err
		}
		return &store.Change{Put: next, ReplacePolicies: true, Topology: &t}, nil
	})
	if err != nil {
		return store.Registration{}, err
	}
	return store.Registration{Policies: clonePolicies(next), Topology: t.Clone()}, nil
}

// planLocked turns the specs of a whole new policy set into policies in
// index order, checking that indices, ids and servers (URLs, by
// serverKey) are unique in it and that no URL is the unspecified address
// (checkURL).
func (r *Registry) planLocked(specs []Spec) ([]routing.Policy, error) {
	taken := make(map[int]bool)
	ids := make(map[string]bool)
	for i, s := range specs {
		field := "policies[" + strconv.Itoa(i) + "]"
		if err := checkURL(field+".url", s.URL); err != nil {
			return nil, err
		}
		if s.Index != nil {
			if taken[*s.Index] {
				return nil, &routing.InputError{Field: field + ".index", Msg: fmt.Sprintf("index %d appears twice", *s.Index)}
			}
			taken[*s.Index] = true
		}
		if s.ID != "" {
			if ids[s.ID] {
				return nil, &routing.InputError{Field: field + ".id", Msg: fmt.Sprintf("id %q appears twice", s.ID)}
			}
			ids[s.ID] = true
		}
	}
	old := make(map[int]routing.Policy, len(r.cur.Policies))
	kept := make(map[string]bool, len(r.cur.Policies)) // ids that are not new
	for _, p := range r.cur.Policies {
		old[p.Index] = p
		kept[p.ID] = true
	}
	next := make([]routing.Policy, 0, len(specs))
	free := 0
	for _, s := range specs {
		index := 0
		if s.Index == nil {
			for taken[free] {
				free++
			}
			index = free
			taken[free] = true
		}
		next = append(next, r.fromSpecKeeping(s, index, old, ids))
	}
	servers := make(map[string]int, len(specs))
	for i, s := range specs {
		key := serverKey(s.URL)
		j, dup := servers[key]
		if !dup {
			servers[key] = i
			continue
		}
		if s.AllowSharedURL {
			continue
		}
		first := fmt.Sprintf("policies[%d] (index %d", j, next[j].Index)
		if specs[j].ID != "" || kept[next[j].ID] {
			first += fmt.Sprintf(", id %q", next[j].ID)
		}
		field := "policies[" + strconv.Itoa(i) + "].url"
		return nil, &ConflictError{Field: field, Msg: fmt.Sprintf("%q %s %s); set allow_shared_url to register one server twice",
			s.URL, isTheURLOf(s.URL, specs[j].URL), first)}
	}
	slices.SortFunc(next, func(a, b routing.Policy) int { return a.Index - b.Index })
	return next, nil
}

// isTheURLOf says, of a url whose serverKey is other's, that it names
// the policy other is registered to: "is already the url of", or, for
// another spelling, `is the same server as "http://a:1", the url of`.
func isTheURLOf(url, other string) string {
	if url == other {
		return "is already the url of"
	}
	return fmt.Sprintf("is the same server as %q, the url of", other)
}

// evalsRegistered is ErrConflict when t names as an eval worker an index
// that ps does not register.
func evalsRegistered(ps []routing.Policy, t routing.Topology) error {
	have := make(map[int]bool, len(ps))
	for _, p := range ps {
		have[p.Index] = true
	}
	nodes := slices.Sorted(maps.Keys(t))
	for _, node := range nodes {
		for _, idx := range t[node]["eval"] {
			if !have[idx] {
				return fmt.Errorf("%w: policy index %d is an eval worker of node %q in the topology; "+
					"replace policies and topology together with PUT /registration, or change the topology first", ErrConflict, idx, node)
			}
		}
	}
	return nil
}

func clonePolicies(ps []routing.Policy) []routing.Policy {
	out := make([]routing.Policy, len(ps))
	for i, p := range ps {
		out[i] = p.Clone()
	}
	return out
}

func (r *Registry) fromSpecKeeping(s Spec, freeIndex int, old map[int]routing.Policy, ids map[string]bool) routing.Policy {
	index := freeIndex
	if s.Index != nil {
		index = *s.Index
	}
	if prev, ok := old[index]; ok && s.ID == "" && prev.URL == s.URL && !ids[prev.ID] {
		s.ID = prev.ID
		ids[prev.ID] = true
	}
	p := r.fromSpec(s, freeIndex)
	for _, prev := range old {
		if prev.ID == p.ID {
			p.Draining = prev.Draining
			// The asleep record is of the server put to sleep: a policy
			// registered again at another URL or as another engine is
			// another server, awake as far as the router knows.
			same := prev.URL == p.URL && prev.EngineName() == p.EngineName()
			p.SleepMarked = prev.SleepMarked && same
			p.PauseMarked = prev.PauseMarked && same
			if s.Version == nil {
				p.Version = prev.Version
			}
			if s.APIKey == nil {
				p.APIKey = prev.APIKey
			}
			if s.AdminAPIKey == nil {
				p.AdminAPIKey = prev.AdminAPIKey
			}
		}
	}
	return p
}

// Delete removes the policy with the given id. It is ErrConflict while the
// topology names its index as an eval worker.
func (r *Registry) Delete(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applyLocked(ctx, func() (*store.Change, error) {
		i := r.findLocked(id)
		if i < 0 {
			return nil, ErrNotFound
		}
		next := slices.Delete(slices.Clone(r.cur.Policies), i, i+1)
		if err := evalsRegistered(next, r.cur.Topology); err != nil {
			return nil, err
		}
		if err := r.checkLocked(next, r.cur.Topology); err != nil {
			return nil, err
		}
		return &store.Change{Delete: []string{id}}, nil
	})
}

// SetDraining drains (or resumes) the policy with the given id: it gets no
// new work but stays registered. The flag is stored.
func (r *Registry) SetDraining(ctx context.Context, id string, draining bool) (routing.Policy, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var p routing.Policy
	err := r.applyLocked(ctx, func() (*store.Change, error) {
		i := r.findLocked(id)
		if i < 0 {
			return nil, ErrNotFound
		}
		p = r.cur.Policies[i].Clone()
		p.Draining = draining
		return &store.Change{Put: []routing.Policy{p}}, nil
	})
	if err != nil {
		return routing.Policy{}, err
	}
	return p.Clone(), nil
}

// SetSleepMarked records (or clears) that a fleet verb put the engines of
// the policies with the given ids to sleep: Policy.SleepMarked, read by
// their probes. The record is stored and published in one write for all
// of them, so that a restarted router and every replica know it. Ids not
// registered (removed meanwhile) are skipped; nothing is written when no
// flag changes.
func (r *Registry) SetSleepMarked(ctx context.Context, marked bool, ids ...string) error {
	return r.setMark(ctx, func(p *routing.Policy) *bool { return &p.SleepMarked }, marked, ids)
}

// SetPauseMarked records (or clears) that a fleet fan-out paused the
// generation of the engines of the policies with the given ids:
// Policy.PauseMarked, read by their probes. Stored and published as
// SetSleepMarked's record is.
func (r *Registry) SetPauseMarked(ctx context.Context, marked bool, ids ...string) error {
	return r.setMark(ctx, func(p *routing.Policy) *bool { return &p.PauseMarked }, marked, ids)
}

// setMark sets the flag mark points at to marked on the policies with
// the given ids, in one write; nothing is written when none changes.
func (r *Registry) setMark(ctx context.Context, mark func(*routing.Policy) *bool, marked bool, ids []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applyLocked(ctx, func() (*store.Change, error) {
		want := make(map[string]bool, len(ids))
		for _, id := range ids {
			want[id] = true
		}
		var put []routing.Policy
		for _, p := range r.cur.Policies {
			if *mark(&p) != marked && want[p.ID] {
				p = p.Clone()
				*mark(&p) = marked
				put = append(put, p)
			}
		}
		if len(put) == 0 {
			return nil, nil
		}
		return &store.Change{Put: put}, nil
	})
}

// Weights returns the weights setting.
func (r *Registry) Weights() store.Weights {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur.Weights.Clone()
}

// SetWeights records the trainer's current weight version and the
// staleness allowed (durably), and from then on no router hands work to a
// policy below Version - MaxStaleness unless a request names its own
// floor.
func (r *Registry) SetWeights(ctx context.Context, w store.Weights) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	w = w.Clone()
	return r.applyLocked(ctx, func() (*store.Change, error) { return &store.Change{Weights: &w}, nil })
}

// SetTopology replaces the topology.
func (r *Registry) SetTopology(ctx context.Context, t routing.Topology) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	t = t.Clone()
	return r.applyLocked(ctx, func() (*store.Change, error) {
		if err := r.checkLocked(r.cur.Policies, t); err != nil {
			return nil, err
		}
		return &store.Change{Topology: &t}, nil
	})
}

// checkLocked checks a registration change before it is stored: the
// routing rules, and that no policy's node_id contradicts the topology
// (the seed allowed that, and its affinity routers then disagree about
// where the policy is; a stored registration that has it still loads).
func (r *Registry) checkLocked(ps []routing.Policy, t routing.Topology) error {
	if err := r.state.Check(ps, t); err != nil {
		return err
	}
	evalNode := make(map[int]string)
	for node, kinds := range t {
		for _, idx := range kinds["eval"] {
			evalNode[idx] = node
		}
	}
	for _, p := range ps {
		if node := evalNode[p.Index]; p.NodeID != "" && node != "" && node != p.NodeID {
			return &routing.InputError{Field: "topology." + node + ".eval.ids", Msg: fmt.Sprintf(
				"policy %d is registered with node_id %q but the topology puts eval %d on node %q; change one of them (PUT /registration changes both at once)",
				p.Index, p.NodeID, p.Index, node)}
		}
	}
	return nil
}

// maxStaleRetries bounds how often a write is planned again because
// another replica wrote first. Between tries the write backs off for a
// random time of up to 2^try ms (at most 64 ms), so that a replica whose
// peer writes in a tight loop still gets its turn.
const maxStaleRetries = 16

// applyLocked stores the change plan makes from r.cur, if it makes one (a
// nil change writes nothing), and publishes the result. The write is
// conditional on the revision r.cur was read at: when another replica
// wrote first, the registration is loaded again and plan runs again on
// it, so that its checks see what the other wrote.
func (r *Registry) applyLocked(ctx context.Context, plan func() (*store.Change, error)) error {
	for try := 0; ; try++ {
		c, err := plan()
		if err != nil || c == nil {
			return err
		}
		rev, err := r.store.Apply(ctx, r.cur.Revision, *c)
		if errors.Is(err, store.ErrStale) && try < maxStaleRetries {
			time.Sleep(time.Duration(rand.Int64N(int64(time.Millisecond) << min(try, 6))))
			if _, err := r.reloadLocked(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		next, err := r.cur.Apply(*c)
		if err != nil {
			return fmt.Errorf("registry: stored change does not apply: %w", err)
		}
		next.Revision = rev
		if err := r.publishLocked(next); err != nil {
			panic(fmt.Sprintf("registry: checked registration rejected: %v", err))
		}
		r.cur = next
		return nil
	}
}

// Refresh loads the registration from the store and publishes it if it
// is newer than the one published: how a replica learns of another's
// writes. It returns what it loaded, the update documents included.
func (r *Registry) Refresh(ctx context.Context) (store.Registration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reloadLocked(ctx)
}

func (r *Registry) reloadLocked(ctx context.Context) (store.Registration, error) {
	loaded, err := r.store.Load(ctx)
	if err != nil {
		return store.Registration{}, fmt.Errorf("registry: load: %w", err)
	}
	if loaded.Revision <= r.cur.Revision {
		return loaded, nil
	}
	reg := loaded
	reg.Updates = nil
	if err := r.publishLocked(reg); err != nil {
		return loaded, fmt.Errorf("registry: stored registration (revision %d) is invalid, kept revision %d: %w", reg.Revision, r.cur.Revision, err)
	}
	r.cur = reg
	return loaded, nil
}

// Follow keeps the published registration up to date with the store's,
// reloading it on each of the store's change notifications, until ctx is
// done. A failed reload is logged by onError and tried again on the next
// notification.
func (r *Registry) Follow(ctx context.Context, onError func(error)) {
	changed := r.store.Watch(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		if _, err := r.Refresh(ctx); err != nil && ctx.Err() == nil {
			onError(err)
		}
	}
}

// publishLocked publishes reg to the routers: policies, topology and the
// weight-version floor.
func (r *Registry) publishLocked(reg store.Registration) error {
	if err := r.state.Update(reg.Policies, reg.Topology); err != nil {
		return err
	}
	r.state.SetMinVersion(reg.Weights.MinVersion())
	return nil
}
