package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"go.uber.org/goleak"

	"github.com/policyrouter/policyrouter/routing"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
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
		if err := s.PutPolicy(context.Background(), p); err != nil {
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

func wantTopology(tb testing.TB, s Store, want Topology) {
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
		if err := s.PutWeights(ctx, Weights{Version: 9, MaxStaleness: &k}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutRegistration(ctx, Registration{Policies: []routing.Policy{testPolicy(0)}}); err != nil {
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
		if err := s.PutTopology(ctx, Topology{"old": {"env": {0}, "eval": {0}}}); err != nil {
			t.Fatal(err)
		}
		topo := Topology{"node-a": {"env": {1}, "eval": {1}}}
		if err := s.PutRegistration(ctx, Registration{Policies: []routing.Policy{testPolicy(1), testPolicy(5)}, Topology: topo}); err != nil {
			t.Fatal(err)
		}
		wantPolicies(t, s, []routing.Policy{testPolicy(1), testPolicy(5)})
		wantTopology(t, s, topo)
		// A cancelled call changes nothing.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.PutRegistration(cctx, Registration{Topology: Topology{}}); !errors.Is(err, context.Canceled) {
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
		p1.NodeID = ""
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
		p.Labels = map[string]string{"new": "label"}
		mustPut(t, s, p)
		wantPolicies(t, s, []routing.Policy{testPolicy(4), p})
	}},
	{"delete and ErrNotFound", func(t *testing.T, s Store) {
		ctx := context.Background()
		mustPut(t, s, testPolicy(0), testPolicy(1), testPolicy(2))
		if err := s.DeletePolicy(ctx, testPolicy(1).ID); err != nil {
			t.Fatalf("DeletePolicy: %v", err)
		}
		wantPolicies(t, s, []routing.Policy{testPolicy(0), testPolicy(2)})
		for _, id := range []string{testPolicy(1).ID, "never-stored"} {
			if err := s.DeletePolicy(ctx, id); !errors.Is(err, ErrNotFound) {
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
		if err := s.ReplacePolicies(ctx, next); err != nil {
			t.Fatalf("ReplacePolicies: %v", err)
		}
		wantPolicies(t, s, []routing.Policy{changed, testPolicy(5), testPolicy(9)})
		if err := s.ReplacePolicies(ctx, nil); err != nil {
			t.Fatalf("ReplacePolicies(nil): %v", err)
		}
		wantPolicies(t, s, nil)
	}},
	{"replace policies with a repeated id keeps the last", func(t *testing.T, s Store) {
		first, last := testPolicy(1), testPolicy(1)
		first.URL, last.URL = "http://first:1", "http://last:1"
		if err := s.ReplacePolicies(context.Background(), []routing.Policy{first, testPolicy(0), last}); err != nil {
			t.Fatalf("ReplacePolicies: %v", err)
		}
		wantPolicies(t, s, []routing.Policy{testPolicy(0), last})
	}},
	{"replace policies keeps the topology", func(t *testing.T, s Store) {
		ctx := context.Background()
		topo := Topology{"node-a": {"eval": {0}}}
		if err := s.PutTopology(ctx, topo); err != nil {
			t.Fatalf("PutTopology: %v", err)
		}
		if err := s.ReplacePolicies(ctx, []routing.Policy{testPolicy(0)}); err != nil {
			t.Fatalf("ReplacePolicies: %v", err)
		}
		wantTopology(t, s, topo)
	}},
	{"topology put and load, nil versus empty", func(t *testing.T, s Store) {
		ctx := context.Background()
		steps := []Topology{
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
			if err := s.PutTopology(ctx, topo); err != nil {
				t.Fatalf("step %d: PutTopology: %v", i, err)
			}
			wantTopology(t, s, topo)
		}
		// A topology write leaves the policies alone.
		mustPut(t, s, testPolicy(0))
		if err := s.PutTopology(ctx, Topology{}); err != nil {
			t.Fatalf("PutTopology: %v", err)
		}
		wantPolicies(t, s, []routing.Policy{testPolicy(0)})
	}},
	{"load returns copies and put copies its argument", func(t *testing.T, s Store) {
		ctx := context.Background()
		p := testPolicy(1)
		topo := Topology{"node-a": {"env": {0, 1}, "eval": {1}}}
		mustPut(t, s, p)
		if err := s.PutTopology(ctx, topo); err != nil {
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
		wantTopology(t, s, Topology{"node-a": {"env": {0, 1}, "eval": {1}}})
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
		if err := s.ReplacePolicies(ctx, ps); err != nil {
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
		if err := s.ReplacePolicies(ctx, nil); err != nil {
			t.Fatalf("ReplacePolicies: %v", err)
		}
		for i := len(ps) - 1; i >= 0; i-- {
			mustPut(t, s, ps[i])
		}
		wantPolicies(t, s, want)
	}},
	{"cancelled context returns an error and writes nothing", func(t *testing.T, s Store) {
		topo := Topology{"node-a": {"eval": {0}}}
		mustPut(t, s, testPolicy(0), testPolicy(1))
		if err := s.PutTopology(context.Background(), topo); err != nil {
			t.Fatalf("PutTopology: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		calls := map[string]func() error{
			"PutPolicy": func() error {
				p := testPolicy(0)
				p.URL = "http://cancelled"
				return s.PutPolicy(ctx, p)
			},
			"PutPolicy new": func() error { return s.PutPolicy(ctx, testPolicy(2)) },
			"DeletePolicy":  func() error { return s.DeletePolicy(ctx, testPolicy(1).ID) },
			"ReplacePolicies": func() error {
				return s.ReplacePolicies(ctx, []routing.Policy{testPolicy(9)})
			},
			"PutTopology": func() error { return s.PutTopology(ctx, Topology{}) },
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
