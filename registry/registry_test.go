package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/store"
)

// failingStore fails every write while fail is set.
type failingStore struct {
	*store.Memory
	fail bool
}

var errDisk = errors.New("disk full")

func (f *failingStore) Apply(ctx context.Context, ifRevision int64, c store.Change) (int64, error) {
	if f.fail {
		return 0, errDisk
	}
	return f.Memory.Apply(ctx, ifRevision, c)
}

func ptr[T any](v T) *T { return &v }

func open(tb testing.TB) (*Registry, *failingStore, *routing.State) {
	tb.Helper()
	st := &failingStore{Memory: store.NewMemory()}
	state := routing.New(routing.Options{})
	r, err := Open(context.Background(), st, state)
	if err != nil {
		tb.Fatal(err)
	}
	return r, st, state
}

// A write the store refuses is neither published to the routers nor
// remembered: the registry, the store and the routing state agree.
func TestFailedWriteChangesNothing(t *testing.T) {
	ctx := context.Background()
	r, st, state := open(t)
	if _, _, err := r.Register(ctx, Spec{URL: "http://a:1", ID: "a"}); err != nil {
		t.Fatal(err)
	}
	topo := routing.Topology{"n": {"env": {0}, "eval": {0}}}
	st.fail = true
	steps := map[string]func() error{
		"register": func() error { _, _, err := r.Register(ctx, Spec{URL: "http://b:1", ID: "b"}); return err },
		"replace":  func() error { _, err := r.Replace(ctx, []Spec{{URL: "http://c:1"}}); return err },
		"delete":   func() error { return r.Delete(ctx, "a") },
		"drain":    func() error { _, err := r.SetDraining(ctx, "a", true); return err },
		"sleep":    func() error { return r.SetSleepMarked(ctx, true, "a") },
		"topology": func() error { return r.SetTopology(ctx, topo) },
		"registration": func() error {
			_, err := r.ReplaceRegistration(ctx, []Spec{{URL: "http://d:1", Index: ptr(0)}}, topo)
			return err
		},
	}
	for name, step := range steps {
		if err := step(); !errors.Is(err, errDisk) {
			t.Errorf("%s with a failing store: err = %v, want the store's error", name, err)
		}
	}
	cur := r.Current()
	if len(cur.Policies) != 1 || cur.Policies[0].ID != "a" || cur.Policies[0].Draining || cur.Policies[0].SleepMarked || cur.Topology != nil {
		t.Errorf("registry changed by failed writes: %+v", cur)
	}
	if ps := state.Snapshot().Policies(); len(ps) != 1 || ps[0].ID != "a" {
		t.Errorf("routing state changed by failed writes: %+v", ps)
	}
	if s := state.Stats(); s.Policies[0].Draining {
		t.Error("drain published although the store refused it")
	}
	stored, _ := st.Load(ctx)
	if len(stored.Policies) != 1 || stored.Topology != nil {
		t.Errorf("store changed: %+v", stored)
	}
}

func TestOpenRestoresDrainAndTopology(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	_, _ = mem.Apply(ctx, store.AnyRevision, store.Change{Put: []routing.Policy{
		{Index: 0, ID: "a", URL: "http://a:1", Capacity: 1, Draining: true},
		{Index: 1, ID: "b", URL: "http://b:1", Capacity: 2},
	}, Topology: &routing.Topology{"n": {"env": {0}, "eval": {1}}}})
	state := routing.New(routing.Options{})
	if _, err := Open(ctx, mem, state); err != nil {
		t.Fatal(err)
	}
	st := state.Stats()
	if !st.Policies[0].Draining || st.Policies[1].Draining || st.Policies[1].Capacity != 2 || st.Policies[1].Node != "n" {
		t.Errorf("restored state: %+v", st.Policies)
	}

	// A stored registration the routers reject is reported, not half-used.
	bad := store.NewMemory()
	_, _ = bad.Apply(ctx, store.AnyRevision, store.Change{Topology: &routing.Topology{"n": {"env": {0}, "eval": {7}}}})
	if _, err := Open(ctx, bad, routing.New(routing.Options{})); err == nil {
		t.Error("Open accepted a topology naming an unregistered eval index")
	}
}

func TestRegisterIndicesAndConflicts(t *testing.T) {
	ctx := context.Background()
	r, _, _ := open(t)
	tests := []struct {
		name        string
		spec        Spec
		wantIndex   int
		wantCreated bool
		wantErr     error
	}{
		{"first takes 0", Spec{URL: "http://a:1", ID: "a"}, 0, true, nil},
		{"explicit index", Spec{URL: "http://c:1", ID: "c", Index: ptr(2)}, 2, true, nil},
		{"lowest free is 1", Spec{URL: "http://b:1", ID: "b"}, 1, true, nil},
		{"same body by id", Spec{URL: "http://b:1", ID: "b"}, 1, false, nil},
		{"same body by index", Spec{URL: "http://c:1", Index: ptr(2)}, 2, false, nil},
		{"index taken", Spec{URL: "http://x:1", Index: ptr(2)}, 0, false, ErrConflict},
		{"id taken", Spec{URL: "http://x:1", ID: "a"}, 0, false, ErrConflict},
		{"capacity differs", Spec{URL: "http://a:1", ID: "a", Capacity: ptr(2)}, 0, false, ErrConflict},
		{"id and index disagree", Spec{URL: "http://a:1", ID: "a", Index: ptr(1)}, 0, false, ErrConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, created, err := r.Register(ctx, tt.spec)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err == nil && (p.Index != tt.wantIndex || created != tt.wantCreated) {
				t.Errorf("got index %d created %v, want %d %v", p.Index, created, tt.wantIndex, tt.wantCreated)
			}
		})
	}
}

// The registry neither changes its caller's labels and topology nor keeps
// them: changing them after the call changes nothing registered.
func TestCallerMapsAreNeitherChangedNorKept(t *testing.T) {
	r, _, st := open(t)
	ctx := context.Background()
	labels := map[string]string{"gpu": "h100"}
	idx := 0
	p, _, err := r.Register(ctx, Spec{URL: "http://a:1", Index: &idx, Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels["gpu"] = "changed by the caller of Register"
	labels["gpu"] = "changed by the caller of Register"
	specs := []Spec{{URL: "http://a:1", Index: &idx, Labels: map[string]string{"gpu": "a100"}}}
	ps, err := r.Replace(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	ps[0].Labels["gpu"] = "changed by the caller of Replace"
	specs[0].Labels["gpu"] = "changed by the caller of Replace"
	topo := routing.Topology{"node-a": {"env": {0}, "eval": {0}}}
	if err := r.SetTopology(ctx, topo); err != nil {
		t.Fatal(err)
	}
	if got := topo["node-a"]["eval"]; len(got) != 1 || got[0] != 0 || len(topo) != 1 {
		t.Fatalf("SetTopology changed its argument: %v", topo)
	}
	topo["node-a"]["eval"][0] = 7
	topo["node-b"] = nil

	cur := r.Current()
	if got := cur.Policies[0].Labels["gpu"]; got != "a100" {
		t.Errorf("registered label = %q; want a100", got)
	}
	if got := cur.Topology; len(got) != 1 || got["node-a"]["eval"][0] != 0 {
		t.Errorf("registered topology = %v; want node-a with eval 0", got)
	}
	if got := st.Snapshot().Policies()[0].Labels["gpu"]; got != "a100" {
		t.Errorf("routing label = %q; want a100", got)
	}
	cur.Policies[0].Labels["gpu"] = "changed by the caller of Current"
	if got := r.Current().Policies[0].Labels["gpu"]; got != "a100" {
		t.Errorf("Current shares its labels: %q", got)
	}
}

// Conflicts name what differs and what to do.
func TestConflictsSayWhatDiffers(t *testing.T) {
	ctx := context.Background()
	r, _, _ := open(t)
	if _, _, err := r.Register(ctx, Spec{URL: "http://a:1", Index: ptr(0), ID: "a"}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		spec Spec
		want string
	}{
		{"another url at the index", Spec{URL: "http://b:1", Index: ptr(0)}, `url (registered "http://a:1", sent "http://b:1")`},
		{"another capacity", Spec{URL: "http://a:1", Index: ptr(0), Capacity: ptr(2)}, "capacity (registered 1, sent 2)"},
		{"the id at another index", Spec{URL: "http://a:1", Index: ptr(3), ID: "a"}, "index (registered 0, sent 3)"},
		{"another id at the index", Spec{URL: "http://a:1", Index: ptr(0), ID: "z"}, `id (registered "a", sent "z")`},
		{"the url at another index", Spec{URL: "http://a:1", Index: ptr(1)}, "allow_shared_url"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := r.Register(ctx, tt.spec)
			if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Register = %v; want a conflict naming %s", err, tt.want)
			}
		})
	}
	if p, created, err := r.Register(ctx, Spec{URL: "http://a:1", Index: ptr(1), AllowSharedURL: true}); err != nil || !created || p.Index != 1 {
		t.Errorf("Register with allow_shared_url = %+v, %v, %v; want index 1 created", p, created, err)
	}
	// Shrinking under a topology that names the policy points to the call
	// that changes both.
	if err := r.SetTopology(ctx, routing.Topology{"n": {"env": {0}, "eval": {0, 1}}}); err != nil {
		t.Fatal(err)
	}
	_, err := r.Replace(ctx, []Spec{{URL: "http://a:1", Index: ptr(0)}})
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "PUT /registration") {
		t.Errorf("Replace removing an eval policy = %v; want a conflict pointing to PUT /registration", err)
	}
	reg, err := r.ReplaceRegistration(ctx, []Spec{{URL: "http://a:1", Index: ptr(0)}}, routing.Topology{"n": {"env": {0}, "eval": {0}}})
	if err != nil || len(reg.Policies) != 1 || reg.Policies[0].ID != "a" {
		t.Errorf("ReplaceRegistration = %+v, %v; want policy a kept alone", reg, err)
	}
}

// The weights setting is stored and restored, with its floor.
func TestWeightsAreRestored(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	r, err := Open(ctx, st, routing.New(routing.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetWeights(ctx, store.Weights{Version: 12, MaxStaleness: ptr(int64(2))}); err != nil {
		t.Fatal(err)
	}
	state := routing.New(routing.Options{})
	r2, err := Open(ctx, st, state)
	if err != nil {
		t.Fatal(err)
	}
	if w := r2.Weights(); w.Version != 12 || w.MinVersion() != 10 || state.MinVersion() != 10 {
		t.Errorf("restored weights %+v, floor %d; want version 12 and floor 10", w, state.MinVersion())
	}
}

// Two replicas on one store: neither loses the other's registrations, a
// replica working from an old read re-checks against what the other wrote,
// and Follow publishes the other's writes.
func TestReplicasOnOneStore(t *testing.T) {
	ctx := context.Background()
	shared := store.NewMemory()
	stateA, stateB := routing.New(routing.Options{}), routing.New(routing.Options{})
	a, err := Open(ctx, shared, stateA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(ctx, shared, stateB)
	if err != nil {
		t.Fatal(err)
	}
	const each = 20
	var wg sync.WaitGroup
	for i := range each {
		for name, r := range map[string]*Registry{"a": a, "b": b} {
			wg.Go(func() {
				spec := Spec{URL: fmt.Sprintf("http://%s-%d:1", name, i), ID: fmt.Sprintf("%s-%d", name, i)}
				if _, _, err := r.Register(ctx, spec); err != nil {
					t.Errorf("replica %s: Register(%s): %v", name, spec.ID, err)
				}
			})
		}
	}
	wg.Wait()
	stored, err := shared.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored.Policies) != 2*each {
		t.Fatalf("store holds %d policies, want %d", len(stored.Policies), 2*each)
	}
	seen := map[int]bool{}
	for _, p := range stored.Policies {
		if seen[p.Index] {
			t.Errorf("index %d given twice", p.Index)
		}
		seen[p.Index] = true
	}

	// b has not heard of a's last writes: its register of a URL a took is
	// still refused, after b reads again.
	if _, _, err := b.Register(ctx, Spec{URL: "http://a-0:1"}); !errors.Is(err, ErrConflict) {
		t.Errorf("b registering a's URL = %v, want ErrConflict", err)
	}

	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go b.Follow(fctx, func(err error) { t.Errorf("follow: %v", err) })
	if _, _, err := a.Register(ctx, Spec{URL: "http://late:1", ID: "late"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := stateB.Snapshot().ByID("late"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b's routing state never got a's registration")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := b.Get("late"); err != nil {
		t.Errorf("b.Get(late) = %v after Follow published it", err)
	}
}

// countingStore counts its loads.
type countingStore struct {
	*store.Memory
	loads int
}

func (c *countingStore) Load(ctx context.Context) (store.Registration, error) {
	c.loads++
	return c.Memory.Load(ctx)
}

// OpenLoaded publishes a registration the caller loaded, without reading
// the store again: start-up reads it once.
func TestOpenLoadedReadsNothing(t *testing.T) {
	st := &countingStore{Memory: store.NewMemory()}
	first, err := Open(context.Background(), st, routing.New(routing.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := first.Register(context.Background(), Spec{URL: "http://127.0.0.1:9/p0"}); err != nil {
		t.Fatal(err)
	}
	st.loads = 0
	loaded, err := st.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	state := routing.New(routing.Options{})
	r, err := OpenLoaded(st, state, loaded)
	if err != nil {
		t.Fatal(err)
	}
	if st.loads != 1 {
		t.Errorf("the store was read %d times; want once", st.loads)
	}
	if got := len(r.Current().Policies); got != 1 || len(state.Snapshot().Policies()) != 1 {
		t.Errorf("registry holds %d policies, routing %d; want 1 each", got, len(state.Snapshot().Policies()))
	}
}

// A URL that names a registered policy's server, in any spelling, is a
// ConflictError naming the field and that policy; within one Replace, the
// later entry's url is the field and the earlier entry is named.
func TestOneServerOnePolicy(t *testing.T) {
	ctx := context.Background()
	r, _, _ := open(t)
	if _, _, err := r.Register(ctx, Spec{URL: "http://127.0.0.1:9000/p/0", Index: ptr(0), ID: "p0"}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		do    func() error
		field string
		want  []string
	}{
		{"register, same spelling", func() error {
			_, _, err := r.Register(ctx, Spec{URL: "http://127.0.0.1:9000/p/0", Index: ptr(1)})
			return err
		}, "url", []string{`"http://127.0.0.1:9000/p/0" is already the url of policy "p0" at index 0`}},
		{"register, another spelling", func() error {
			_, _, err := r.Register(ctx, Spec{URL: "http://localhost:9000/p/0/"})
			return err
		}, "url", []string{`"http://localhost:9000/p/0/" is the same server as "http://127.0.0.1:9000/p/0", the url of policy "p0" at index 0`}},
		{"replace, same spelling", func() error {
			_, err := r.Replace(ctx, []Spec{{URL: "http://a:1", Index: ptr(3)}, {URL: "http://a:1"}})
			return err
		}, "policies[1].url", []string{`"http://a:1" is already the url of policies[0] (index 3)`}},
		{"replace, another spelling, named entry", func() error {
			_, err := r.ReplaceRegistration(ctx, []Spec{{URL: "http://b:1", ID: "b"}, {URL: "http://x:1"}, {URL: "HTTP://B:1/"}}, nil)
			return err
		}, "policies[2].url", []string{`the url of policies[0] (index 0, id "b")`}},
		{"replace keeping an id", func() error {
			_, err := r.Replace(ctx, []Spec{{URL: "http://127.0.0.1:9000/p/0", Index: ptr(0)}, {URL: "http://[::1]:9000/p/0"}})
			return err
		}, "policies[1].url", []string{`policies[0] (index 0, id "p0")`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do()
			var ce *ConflictError
			if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) || ce.Field != tt.field {
				t.Fatalf("err = %v; want a ConflictError on %s", err, tt.field)
			}
			for _, w := range append(tt.want, "allow_shared_url") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err.Error(), w)
				}
			}
		})
	}
	if got := r.Current().Policies; len(got) != 1 || got[0].ID != "p0" {
		t.Errorf("refused calls changed the registration: %+v", got)
	}
	// The same policy and body again is idempotent.
	if p, created, err := r.Register(ctx, Spec{URL: "http://127.0.0.1:9000/p/0", Index: ptr(0), ID: "p0"}); err != nil || created || p.ID != "p0" {
		t.Errorf("Register the same again = %+v, %v, %v; want p0, not created", p, created, err)
	}
}

// marked returns the SleepMarked flag of every policy of ps by id.
func marked(ps []routing.Policy) map[string]bool {
	out := make(map[string]bool, len(ps))
	for _, p := range ps {
		out[p.ID] = p.SleepMarked
	}
	return out
}

// The asleep record of the fleet verbs is stored and published in one
// write, restored by a registry opened on the same store, and kept when
// the same server is registered again, but not for another server.
func TestSleepMarked(t *testing.T) {
	ctx := context.Background()
	r, st, state := open(t)
	specs := []Spec{{URL: "http://a:1", ID: "a", Engine: "sglang"}, {URL: "http://b:1", ID: "b", Engine: "sglang"}, {URL: "http://c:1", ID: "c"}}
	if _, err := r.Replace(ctx, specs); err != nil {
		t.Fatal(err)
	}
	if err := r.SetSleepMarked(ctx, true, "a", "b", "gone"); err != nil {
		t.Fatalf("SetSleepMarked: %v", err)
	}
	wantMarks := map[string]bool{"a": true, "b": true, "c": false}
	stored, _ := st.Load(ctx)
	for what, got := range map[string]map[string]bool{
		"registry": marked(r.Current().Policies), "store": marked(stored.Policies), "routing state": marked(state.Snapshot().Policies()),
	} {
		if fmt.Sprint(got) != fmt.Sprint(wantMarks) {
			t.Errorf("%s marks %v; want %v", what, got, wantMarks)
		}
	}
	// Marking what is marked writes nothing.
	if err := r.SetSleepMarked(ctx, true, "a"); err != nil {
		t.Fatal(err)
	}
	if again, _ := st.Load(ctx); again.Revision != stored.Revision {
		t.Errorf("a mark that changes nothing wrote revision %d (was %d)", again.Revision, stored.Revision)
	}

	// A router started on the same store knows it.
	restarted := routing.New(routing.Options{})
	r2, err := Open(ctx, st, restarted)
	if err != nil {
		t.Fatal(err)
	}
	if got := marked(restarted.Snapshot().Policies()); fmt.Sprint(got) != fmt.Sprint(wantMarks) {
		t.Errorf("after a restart, marks %v; want %v", got, wantMarks)
	}

	// The trainer sends its set again: a keeps its mark (same server), b
	// moved to another URL and is another server.
	specs[1].URL = "http://b2:1"
	if _, err := r2.Replace(ctx, specs); err != nil {
		t.Fatal(err)
	}
	wantMarks = map[string]bool{"a": true, "b": false, "c": false}
	if got := marked(r2.Current().Policies); fmt.Sprint(got) != fmt.Sprint(wantMarks) {
		t.Errorf("after re-registration, marks %v; want %v", got, wantMarks)
	}
	// Registering a again, same body, changes nothing.
	if _, created, err := r2.Register(ctx, Spec{URL: "http://a:1", ID: "a", Engine: "sglang"}); err != nil || created {
		t.Fatalf("Register again: created %v, %v", created, err)
	}
	if p, _ := r2.Get("a"); !p.SleepMarked {
		t.Error("a lost its mark when registered again")
	}
	if err := r2.SetSleepMarked(ctx, false, "a"); err != nil {
		t.Fatal(err)
	}
	if p, _ := r2.Get("a"); p.SleepMarked {
		t.Error("a still marked after it was cleared")
	}
}

// A replica following the store sees another's mark: the replica that
// becomes leader keeps asleep policies out of routing.
func TestSleepMarkedReachesFollower(t *testing.T) {
	ctx := context.Background()
	shared := store.NewMemory()
	stateB := routing.New(routing.Options{})
	a, err := Open(ctx, shared, routing.New(routing.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(ctx, shared, stateB)
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go b.Follow(fctx, func(err error) { t.Errorf("follow: %v", err) })
	if _, _, err := a.Register(ctx, Spec{URL: "http://a:1", ID: "a", Engine: "sglang"}); err != nil {
		t.Fatal(err)
	}
	if err := a.SetSleepMarked(ctx, true, "a"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "b's routing state has a's mark", func() bool {
		return marked(stateB.Snapshot().Policies())["a"]
	})
}

// Every spelling of a registered server's URL is refused, naming the
// policy registered there, unless allow_shared_url; the unspecified
// address is invalid input, shared or not.
func TestEverySpellingOneServer(t *testing.T) {
	ctx := context.Background()
	const url = "http://127.0.0.1:9000/p/0"
	for _, spelling := range []string{
		url,
		"http://127.0.0.1:9000//p/0",
		"http://127.0.0.1:9000/p/./0",
		"http://127.0.0.1:9000/p/q/../0",
		"http://127.0.0.1:9000/p/%30",
		"http://localhost:9000/p/0",
		"http://[::1]:9000/p/0",
		"http://127.0.0.1:9000/p/0/",
		"HTTP://127.0.0.1:9000/p/0",
	} {
		t.Run(spelling, func(t *testing.T) {
			r, _, _ := open(t)
			if _, _, err := r.Register(ctx, Spec{URL: url, ID: "p0"}); err != nil {
				t.Fatal(err)
			}
			_, _, err := r.Register(ctx, Spec{URL: spelling})
			var ce *ConflictError
			if !errors.As(err, &ce) || ce.Field != "url" || !strings.Contains(ce.Msg, `policy "p0" at index 0`) {
				t.Errorf("Register = %v; want a ConflictError on url naming policy p0", err)
			}
			_, err = r.Replace(ctx, []Spec{{URL: url}, {URL: spelling}})
			if !errors.As(err, &ce) || ce.Field != "policies[1].url" || !strings.Contains(ce.Msg, "policies[0] (index 0") {
				t.Errorf("Replace = %v; want a ConflictError on policies[1].url naming policies[0]", err)
			}
			if _, created, err := r.Register(ctx, Spec{URL: spelling, AllowSharedURL: true}); err != nil || !created {
				t.Errorf("Register with allow_shared_url = %v, %v; want created", created, err)
			}
		})
	}
	for _, unspecified := range []string{"http://0.0.0.0:9000/p/0", "http://[::]:9000/p/0"} {
		t.Run(unspecified, func(t *testing.T) {
			r, _, _ := open(t)
			if _, _, err := r.Register(ctx, Spec{URL: url, ID: "p0"}); err != nil {
				t.Fatal(err)
			}
			for _, shared := range []bool{false, true} {
				_, _, err := r.Register(ctx, Spec{URL: unspecified, AllowSharedURL: shared})
				var in *routing.InputError
				if !errors.As(err, &in) || in.Field != "url" {
					t.Errorf("Register (allow_shared_url %v) = %v; want an InputError on url", shared, err)
				}
				_, err = r.ReplaceRegistration(ctx, []Spec{{URL: url}, {URL: unspecified, AllowSharedURL: shared}}, nil)
				if !errors.As(err, &in) || in.Field != "policies[1].url" {
					t.Errorf("ReplaceRegistration (allow_shared_url %v) = %v; want an InputError on policies[1].url", shared, err)
				}
			}
			if got := r.Current().Policies; len(got) != 1 {
				t.Errorf("refused calls changed the registration: %+v", got)
			}
		})
	}
}

// A store written when fewer spellings were compared may hold policies
// that name one server, or the unspecified address: it still loads, as it
// is, and start-up warns of each shared server once.
func TestStoredSharedServersLoad(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	stored := []routing.Policy{
		{Index: 0, ID: "p0", URL: "http://127.0.0.1:9000/p/0", Capacity: 1},
		{Index: 1, ID: "p1", URL: "http://127.0.0.1:9000//p/%30", Capacity: 1},
		{Index: 2, ID: "p2", URL: "http://0.0.0.0:9000/p/2", Capacity: 1},
		{Index: 3, ID: "p3", URL: "http://127.0.0.1:9000/p/3", Capacity: 1},
	}
	if _, err := st.Apply(ctx, 0, store.Change{Put: stored}); err != nil {
		t.Fatal(err)
	}
	state := routing.New(routing.Options{})
	r, err := Open(ctx, st, state)
	if err != nil {
		t.Fatalf("Open = %v; want the stored registration loaded", err)
	}
	if got := len(state.Snapshot().Policies()); got != len(stored) {
		t.Errorf("routing holds %d policies; want %d", got, len(stored))
	}
	var logs strings.Builder
	r.WarnSharedServers(slog.New(slog.NewTextHandler(&logs, nil)))
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("logged %d lines; want one warning:\n%s", len(lines), logs.String())
	}
	for _, want := range []string{"level=WARN", "allow_shared_url", "server=http://127.0.0.1:9000/p/0", `id \"p0\"`, `id \"p1\"`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("warning lacks %q: %s", want, lines[0])
		}
	}
	for _, not := range []string{"p2", "p3"} {
		if strings.Contains(lines[0], `id \"`+not+`\"`) {
			t.Errorf("warning names %s, which shares no server: %s", not, lines[0])
		}
	}
	// Registering the server again is refused as before.
	if _, _, err := r.Register(ctx, Spec{URL: "http://localhost:9000/p/0"}); !errors.Is(err, ErrConflict) {
		t.Errorf("Register another spelling = %v; want ErrConflict", err)
	}
}
