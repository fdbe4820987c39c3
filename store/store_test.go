package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/policyrouter/policyrouter/internal/etcdtest"
	"github.com/policyrouter/policyrouter/routing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if testEtcd.stop != nil {
		testEtcd.stop()
	}
	if code == 0 {
		if err := goleak.Find(etcdtest.IgnoreLeaks()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// impls lists every Store implementation; the behavioural suite runs
// against each.
var impls = []struct {
	name string
	open func(tb testing.TB) Store
}{
	{"memory", func(tb testing.TB) Store {
		tb.Helper()
		s := NewMemory()
		tb.Cleanup(func() { _ = s.Close() })
		return s
	}},
	{"bolt", func(tb testing.TB) Store {
		tb.Helper()
		return openBolt(tb, tb.TempDir())
	}},
	{"etcd", func(tb testing.TB) Store {
		tb.Helper()
		return openEtcd(tb, tb.Name())
	}},
}

// testEtcd is the embedded etcd server of the package's tests, started by
// the first test that needs it; each test uses a prefix of its own.
var testEtcd struct {
	once     sync.Once
	endpoint string
	stop     func()
}

// openEtcd opens an Etcd store on the package's embedded server, under a
// prefix made from name, and closes it when the test ends.
func openEtcd(tb testing.TB, name string) *Etcd {
	tb.Helper()
	testEtcd.once.Do(func() {
		srv, err := etcdtest.StartServer()
		if err != nil {
			tb.Fatal(err)
		}
		testEtcd.endpoint, testEtcd.stop = srv.Endpoint, srv.Stop
	})
	if testEtcd.endpoint == "" {
		tb.Fatal("embedded etcd did not start")
	}
	s, err := OpenEtcd(context.Background(), EtcdOptions{Endpoints: []string{testEtcd.endpoint}, Prefix: "/test/" + name + "/"})
	if err != nil {
		tb.Fatalf("OpenEtcd: %v", err)
	}
	tb.Cleanup(func() {
		// Leave the prefix empty for the next run of the same test (-count).
		_, _ = s.Client().Delete(context.Background(), s.Prefix(), clientv3.WithPrefix())
		_ = s.Close()
	})
	return s
}

// openBolt opens a Bolt store in dir and closes it when the test ends.
func openBolt(tb testing.TB, dir string) *Bolt {
	tb.Helper()
	s, err := OpenBolt(dir, BoltOptions{})
	if err != nil {
		tb.Fatalf("OpenBolt(%q): %v", dir, err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// testPolicy returns a policy with index i and every field set.
func testPolicy(i int) routing.Policy {
	return routing.Policy{
		Index:    i,
		ID:       fmt.Sprintf("p-%05d", i),
		URL:      fmt.Sprintf("http://10.0.%d.%d:8000", i/250, i%250),
		NodeID:   fmt.Sprintf("node-%d", i%4),
		Capacity: 1 + i%3,
		Labels:   map[string]string{"gpu": "a100", "shard": fmt.Sprint(i % 2)},
		Draining: i%5 == 0,
		// The fleet verbs' asleep record is stored too: a restarted router
		// must not route to an engine put to sleep before.
		SleepMarked: i%4 == 1,
		// Engine and the write-only keys are stored too: the router needs
		// them back after a restart to probe and update the policy.
		Engine:      []string{"policyrouter", "sglang", "vllm"}[i%3],
		APIKey:      routing.Secret(fmt.Sprintf("key-%d", i)),
		AdminAPIKey: routing.Secret(fmt.Sprintf("admin-%d", i)),
	}
}

// The one-call writes the tests make, each an unconditional Apply.

func putPolicy(ctx context.Context, s Store, p routing.Policy) error {
	_, err := s.Apply(ctx, AnyRevision, Change{Put: []routing.Policy{p}})
	return err
}

func deletePolicy(ctx context.Context, s Store, id string) error {
	_, err := s.Apply(ctx, AnyRevision, Change{Delete: []string{id}})
	return err
}

func replacePolicies(ctx context.Context, s Store, ps []routing.Policy) error {
	_, err := s.Apply(ctx, AnyRevision, Change{Put: ps, ReplacePolicies: true})
	return err
}

func putTopology(ctx context.Context, s Store, t routing.Topology) error {
	_, err := s.Apply(ctx, AnyRevision, Change{Topology: &t})
	return err
}

func putRegistration(ctx context.Context, s Store, reg Registration) error {
	_, err := s.Apply(ctx, AnyRevision, Change{Put: reg.Policies, ReplacePolicies: true, Topology: &reg.Topology})
	return err
}

func putWeights(ctx context.Context, s Store, w Weights) error {
	_, err := s.Apply(ctx, AnyRevision, Change{Weights: &w})
	return err
}

// waitNotified fails tb unless ch receives within a generous bound.
func waitNotified(tb testing.TB, ch <-chan struct{}, what string) {
	tb.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		tb.Fatalf("no watch notification after %s", what)
	}
}

// drain empties ch of a pending notification.
func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

func mustLoad(tb testing.TB, s Store) Registration {
	tb.Helper()
	reg, err := s.Load(context.Background())
	if err != nil {
		tb.Fatalf("Load: %v", err)
	}
	return reg
}

func mustPut(tb testing.TB, s Store, ps ...routing.Policy) {
	tb.Helper()
	for _, p := range ps {
		if err := putPolicy(context.Background(), s, p); err != nil {
			tb.Fatalf("PutPolicy(%q): %v", p.ID, err)
		}
	}
}

func wantPolicies(tb testing.TB, s Store, want []routing.Policy) {
	tb.Helper()
	got := mustLoad(tb, s).Policies
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		tb.Errorf("Load().Policies:\n got %+v\nwant %+v", got, want)
	}
}

func wantTopology(tb testing.TB, s Store, want routing.Topology) {
	tb.Helper()
	got := mustLoad(tb, s).Topology
	if !reflect.DeepEqual(got, want) {
		tb.Errorf("Load().Topology:\n got %#v\nwant %#v", got, want)
	}
}

// storeCases is the behaviour every Store must have.
var storeCases = []struct {
	name string
	run  func(t *testing.T, s Store)
}{
	{"PutWeights is kept, and PutRegistration leaves it", func(t *testing.T, s Store) {
		ctx := context.Background()
		k := int64(3)
		if err := putWeights(ctx, s, Weights{Version: 9, MaxStaleness: &k}); err != nil {
			t.Fatal(err)
		}
		if err := putRegistration(ctx, s, Registration{Policies: []routing.Policy{testPolicy(0)}}); err != nil {
			t.Fatal(err)
		}
		reg, err := s.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if reg.Weights.Version != 9 || reg.Weights.MaxStaleness == nil || *reg.Weights.MaxStaleness != 3 || reg.Weights.MinVersion() != 6 {
			t.Errorf("loaded weights %+v; want version 9, max staleness 3", reg.Weights)
		}
	}},
	{"PutRegistration replaces policies and topology together", func(t *testing.T, s Store) {
		ctx := context.Background()
		mustPut(t, s, testPolicy(0), testPolicy(1), testPolicy(2))
		if err := putTopology(ctx, s, routing.Topology{"old": {"env": {0}, "eval": {0}}}); err != nil {
			t.Fatal(err)
		}
		topo := routing.Topology{"node-a": {"env": {1}, "eval": {1}}}
		if err := putRegistration(ctx, s, Registration{Policies: []routing.Policy{testPolicy(1), testPolicy(5)}, Topology: topo}); err != nil {
			t.Fatal(err)
		}
		wantPolicies(t, s, []routing.Policy{testPolicy(1), testPolicy(5)})
		wantTopology(t, s, topo)
		// A cancelled call changes nothing.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := putRegistration(cctx, s, Registration{Topology: routing.Topology{}}); !errors.Is(err, context.Canceled) {
			t.Errorf("PutRegistration with a cancelled context = %v; want context.Canceled", err)
		}
		wantPolicies(t, s, []routing.Policy{testPolicy(1), testPolicy(5)})
		wantTopology(t, s, topo)
	}},
	{"empty", func(t *testing.T, s Store) {
		reg := mustLoad(t, s)
		if reg.Policies == nil || len(reg.Policies) != 0 {
			t.Errorf("Policies = %#v, want empty non-nil slice", reg.Policies)
		}
		if reg.Topology != nil {
			t.Errorf("Topology = %#v, want nil", reg.Topology)
		}
	}},
	{"put and load round trip", func(t *testing.T, s Store) {
		p0, p1 := testPolicy(0), testPolicy(1)
		p0.Labels = map[string]string{"zone": "eu-west-1", "weights": "v17"}
		p0.Draining = true
		p0.SleepMarked = true
		p1.NodeID = ""
		p1.SleepMarked = false
		p1.Labels = nil
		mustPut(t, s, p1, p0)
		wantPolicies(t, s, []routing.Policy{p0, p1})
	}},
	{"put replaces by id", func(t *testing.T, s Store) {
		p := testPolicy(3)
		mustPut(t, s, p, testPolicy(4))
		p.URL = "http://replaced:9000"
		p.Index = 7
		p.Draining = !p.Draining
		p.SleepMarked = !p.SleepMarked
		p.Labels = map[string]string{"new": "label"}
		mustPut(t, s, p)
		wantPolicies(t, s, []routing.Policy{testPolicy(4), p})
	}},
	{"delete and ErrNotFound", func(t *testing.T, s Store) {
		ctx := context.Background()
		mustPut(t, s, testPolicy(0), testPolicy(1), testPolicy(2))
		if err := deletePolicy(ctx, s, testPolicy(1).ID); err != nil {
			t.Fatalf("DeletePolicy: %v", err)
		}
		wantPolicies(t, s, []routing.Policy{testPolicy(0), testPolicy(2)})
		for _, id := range []string{testPolicy(1).ID, "never-stored"} {
			if err := deletePolicy(ctx, s, id); !errors.Is(err, ErrNotFound) {
				t.Errorf("DeletePolicy(%q) = %v, want ErrNotFound", id, err)
			}
		}
		wantPolicies(t, s, []routing.Policy{testPolicy(0), testPolicy(2)})
	}},
	{"replace policies replaces the whole set", func(t *testing.T, s Store) {
		ctx := context.Background()
		mustPut(t, s, testPolicy(0), testPolicy(1), testPolicy(2))
		changed := testPolicy(2)
		changed.URL = "http://changed:1"
		next := []routing.Policy{testPolicy(9), changed, testPolicy(5)}
		if err := replacePolicies(ctx, s, next); err != nil {
			t.Fatalf("ReplacePolicies: %v", err)
		}
		wantPolicies(t, s, []routing.Policy{changed, testPolicy(5), testPolicy(9)})
		if err := replacePolicies(ctx, s, nil); err != nil {
			t.Fatalf("ReplacePolicies(nil): %v", err)
		}
		wantPolicies(t, s, nil)
	}},
	{"replace policies with a repeated id keeps the last", func(t *testing.T, s Store) {
		first, last := testPolicy(1), testPolicy(1)
		first.URL, last.URL = "http://first:1", "http://last:1"
		if err := replacePolicies(context.Background(), s, []routing.Policy{first, testPolicy(0), last}); err != nil {
			t.Fatalf("ReplacePolicies: %v", err)
		}
		wantPolicies(t, s, []routing.Policy{testPolicy(0), last})
	}},
	{"replace policies keeps the topology", func(t *testing.T, s Store) {
		ctx := context.Background()
		topo := routing.Topology{"node-a": {"eval": {0}}}
		if err := putTopology(ctx, s, topo); err != nil {
			t.Fatalf("PutTopology: %v", err)
		}
		if err := replacePolicies(ctx, s, []routing.Policy{testPolicy(0)}); err != nil {
			t.Fatalf("ReplacePolicies: %v", err)
		}
		wantTopology(t, s, topo)
	}},
	{"topology put and load, nil versus empty", func(t *testing.T, s Store) {
		ctx := context.Background()
		steps := []routing.Topology{
			{
				"node-a": {"env": {0, 1}, "eval": {0}},
				"node-b": {"env": {2, 3}, "eval": {1, 2}, "learner": {}},
				"node-c": {"env": nil},
				"node-d": {},
			},
			{},
			nil,
			{"node-z": {"eval": {7}}},
		}
		for i, topo := range steps {
			if err := putTopology(ctx, s, topo); err != nil {
				t.Fatalf("step %d: PutTopology: %v", i, err)
			}
			wantTopology(t, s, topo)
		}
		// A topology write leaves the policies alone.
		mustPut(t, s, testPolicy(0))
		if err := putTopology(ctx, s, routing.Topology{}); err != nil {
			t.Fatalf("PutTopology: %v", err)
		}
		wantPolicies(t, s, []routing.Policy{testPolicy(0)})
	}},
	{"load returns copies and put copies its argument", func(t *testing.T, s Store) {
		ctx := context.Background()
		p := testPolicy(1)
		topo := routing.Topology{"node-a": {"env": {0, 1}, "eval": {1}}}
		mustPut(t, s, p)
		if err := putTopology(ctx, s, topo); err != nil {
			t.Fatalf("PutTopology: %v", err)
		}
		// Mutating the arguments after the calls changes nothing.
		p.Labels["gpu"] = "mutated-arg"
		topo["node-a"]["env"][0] = 99
		topo["node-x"] = nil

		reg := mustLoad(t, s)
		reg.Policies[0].Labels["gpu"] = "mutated-result"
		reg.Policies[0].URL = "http://mutated"
		reg.Topology["node-a"]["env"][1] = 98
		reg.Topology["node-a"]["eval"] = append(reg.Topology["node-a"]["eval"], 5)
		delete(reg.Topology, "node-a")

		wantPolicies(t, s, []routing.Policy{testPolicy(1)})
		wantTopology(t, s, routing.Topology{"node-a": {"env": {0, 1}, "eval": {1}}})
	}},
	{"load is sorted by index, then id", func(t *testing.T, s Store) {
		ctx := context.Background()
		var ps []routing.Policy
		for _, i := range []int{7, 0, 12, 3, 5, 1, 100, 2} {
			ps = append(ps, testPolicy(i))
		}
		// Two policies with the same index (the store does not enforce
		// uniqueness) come out in id order.
		dupB, dupA := testPolicy(4), testPolicy(4)
		dupB.ID, dupA.ID = "dup-b", "dup-a"
		ps = append(ps, dupB, dupA)
		if err := replacePolicies(ctx, s, ps); err != nil {
			t.Fatalf("ReplacePolicies: %v", err)
		}
		var want []routing.Policy
		for _, i := range []int{0, 1, 2, 3} {
			want = append(want, testPolicy(i))
		}
		want = append(want, dupA, dupB)
		for _, i := range []int{5, 7, 12, 100} {
			want = append(want, testPolicy(i))
		}
		wantPolicies(t, s, want)
		// The same through individual puts in another order.
		if err := replacePolicies(ctx, s, nil); err != nil {
			t.Fatalf("ReplacePolicies: %v", err)
		}
		for i := len(ps) - 1; i >= 0; i-- {
			mustPut(t, s, ps[i])
		}
		wantPolicies(t, s, want)
	}},
	{"revisions grow with every write and guard conditional writes", func(t *testing.T, s Store) {
		ctx := context.Background()
		if rev := mustLoad(t, s).Revision; rev != 0 {
			t.Fatalf("revision of an empty store = %d, want 0", rev)
		}
		r1, err := s.Apply(ctx, 0, Change{Put: []routing.Policy{testPolicy(0)}})
		if err != nil || r1 <= 0 {
			t.Fatalf("Apply(if 0) = %d, %v; want a revision > 0", r1, err)
		}
		if got := mustLoad(t, s).Revision; got != r1 {
			t.Fatalf("Load().Revision = %d, want %d", got, r1)
		}
		// A writer that read revision 0 has missed r1: refused, nothing written.
		if _, err := s.Apply(ctx, 0, Change{Put: []routing.Policy{testPolicy(1)}}); !errors.Is(err, ErrStale) {
			t.Fatalf("Apply(if 0) after a write = %v, want ErrStale", err)
		}
		wantPolicies(t, s, []routing.Policy{testPolicy(0)})
		k := int64(2)
		r2, err := s.Apply(ctx, r1, Change{Delete: []string{testPolicy(0).ID}, Put: []routing.Policy{testPolicy(3)}, Weights: &Weights{Version: 5, MaxStaleness: &k}})
		if err != nil || r2 <= r1 {
			t.Fatalf("Apply(if %d) = %d, %v; want a revision > %d", r1, r2, err, r1)
		}
		reg := mustLoad(t, s)
		if reg.Revision != r2 || reg.Weights.MinVersion() != 3 {
			t.Errorf("Load() = revision %d, weights %+v; want %d, min version 3", reg.Revision, reg.Weights, r2)
		}
		wantPolicies(t, s, []routing.Policy{testPolicy(3)})
		// A failed delete changes nothing, not even the revision.
		if _, err := s.Apply(ctx, r2, Change{Put: []routing.Policy{testPolicy(4)}, Delete: []string{"absent"}}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Apply deleting an absent id = %v, want ErrNotFound", err)
		}
		if reg := mustLoad(t, s); reg.Revision != r2 || len(reg.Policies) != 1 {
			t.Errorf("after a failed Apply: revision %d, %d policies; want %d, 1", reg.Revision, len(reg.Policies), r2)
		}
		// An update document is not part of the registration's revision.
		if err := s.PutUpdate(ctx, "u1", []byte(`{"id":"u1"}`)); err != nil {
			t.Fatal(err)
		}
		if reg := mustLoad(t, s); reg.Revision != r2 || string(reg.Updates["u1"]) != `{"id":"u1"}` {
			t.Errorf("after PutUpdate: revision %d, updates %q; want %d and the document", reg.Revision, reg.Updates, r2)
		}
		if r3, err := s.Apply(ctx, AnyRevision, Change{Put: []routing.Policy{testPolicy(5)}}); err != nil || r3 <= r2 {
			t.Errorf("Apply(any) = %d, %v; want a revision > %d", r3, err, r2)
		}
	}},
	{"concurrent conditional writers: exactly one wins each round", func(t *testing.T, s Store) {
		ctx := context.Background()
		const writers = 8
		for round := range 3 {
			rev := mustLoad(t, s).Revision
			var wg sync.WaitGroup
			wins := make(chan int, writers)
			for w := range writers {
				wg.Go(func() {
					p := testPolicy(round*writers + w)
					if _, err := s.Apply(ctx, rev, Change{Put: []routing.Policy{p}}); err == nil {
						wins <- w
					} else if !errors.Is(err, ErrStale) {
						t.Errorf("Apply = %v, want nil or ErrStale", err)
					}
				})
			}
			wg.Wait()
			close(wins)
			if n := len(wins); n != 1 {
				t.Fatalf("round %d: %d writers won, want exactly 1", round, n)
			}
		}
		if n := len(mustLoad(t, s).Policies); n != 3 {
			t.Errorf("%d policies stored, want 3 (one per round)", n)
		}
	}},
	{"watch notifies at start and after each write", func(t *testing.T, s Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch := s.Watch(ctx)
		waitNotified(t, ch, "start")
		mustPut(t, s, testPolicy(0))
		waitNotified(t, ch, "a put")
		drain(ch)
		if err := s.PutUpdate(ctx, "u", []byte("{}")); err != nil {
			t.Fatal(err)
		}
		waitNotified(t, ch, "an update document")
		drain(ch)
		if err := putTopology(ctx, s, routing.Topology{"n": {"env": {0}}}); err != nil {
			t.Fatal(err)
		}
		waitNotified(t, ch, "a topology")
	}},
	{"cancelled context returns an error and writes nothing", func(t *testing.T, s Store) {
		topo := routing.Topology{"node-a": {"eval": {0}}}
		mustPut(t, s, testPolicy(0), testPolicy(1))
		if err := putTopology(context.Background(), s, topo); err != nil {
			t.Fatalf("PutTopology: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		calls := map[string]func() error{
			"PutPolicy": func() error {
				p := testPolicy(0)
				p.URL = "http://cancelled"
				return putPolicy(ctx, s, p)
			},
			"PutPolicy new": func() error { return putPolicy(ctx, s, testPolicy(2)) },
			"DeletePolicy":  func() error { return deletePolicy(ctx, s, testPolicy(1).ID) },
			"ReplacePolicies": func() error {
				return replacePolicies(ctx, s, []routing.Policy{testPolicy(9)})
			},
			"PutTopology": func() error { return putTopology(ctx, s, routing.Topology{}) },
			"Load": func() error {
				_, err := s.Load(ctx)
				return err
			},
		}
		for name, call := range calls {
			if err := call(); !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a cancelled context = %v, want context.Canceled", name, err)
			}
		}
		wantPolicies(t, s, []routing.Policy{testPolicy(0), testPolicy(1)})
		wantTopology(t, s, topo)
	}},
}

func TestStore(t *testing.T) {
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			for _, tc := range storeCases {
				t.Run(tc.name, func(t *testing.T) {
					tc.run(t, impl.open(t))
				})
			}
		})
	}
}
