package routing

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// benchLoads returns p deterministic loads in [0, 64).
func benchLoads(p int) []int64 {
	r := rand.New(rand.NewPCG(1, uint64(p)))
	loads := make([]int64, p)
	for i := range loads {
		loads[i] = r.Int64N(64)
	}
	return loads
}

// benchCluster returns p policies spread round-robin over the given number
// of nodes, with env workers 0..p-1 placed like the policies of the same
// number.
func benchCluster(p, nodes int) ([]Policy, Topology) {
	ps := make([]Policy, p)
	topo := make(Topology, nodes)
	for i := range ps {
		node := "node-" + strconv.Itoa(i%nodes)
		ps[i] = Policy{Index: i, ID: "p" + strconv.Itoa(i)}
		if topo[node] == nil {
			topo[node] = map[string][]int{}
		}
		topo[node][KindEnv] = append(topo[node][KindEnv], i)
		topo[node][KindEval] = append(topo[node][KindEval], i)
	}
	return ps, topo
}

// benchEnvIDs returns n env ids over workers 0..workers-1.
func benchEnvIDs(n, workers int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "env-" + strconv.Itoa((i*7)%workers)
	}
	return ids
}

func newBenchState(b *testing.B, p, nodes int) *State {
	b.Helper()
	st := New(Options{})
	ps, topo := benchCluster(p, nodes)
	if err := st.Update(ps, topo); err != nil {
		b.Fatal(err)
	}
	return st
}

func reportPerTask(b *testing.B, tasks int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tasks), "ns/task")
}

var benchSizes = []struct{ n, p int }{{64, 16}, {4096, 1024}}

func BenchmarkLeastLoaded(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(fmt.Sprintf("n=%d/p=%d", sz.n, sz.p), func(b *testing.B) {
			loads := benchLoads(sz.p)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := LeastLoaded(loads, sz.n); err != nil {
					b.Fatal(err)
				}
			}
			reportPerTask(b, sz.n)
		})
	}
}

func BenchmarkNodeAffinity(b *testing.B) {
	for _, sz := range []struct{ n, p, nodes int }{{1, 1024, 16}, {8, 1024, 16}, {9, 1024, 16}, {64, 16, 4}, {4096, 1024, 16}} {
		b.Run(fmt.Sprintf("n=%d/p=%d/nodes=%d", sz.n, sz.p, sz.nodes), func(b *testing.B) {
			st := newBenchState(b, sz.p, sz.nodes)
			snap := st.Snapshot()
			in := AffinityInput{EnvNode: snap.envNode, EnvIDs: benchEnvIDs(sz.n, sz.p)}
			for pos, p := range snap.Policies() {
				in.Indices = append(in.Indices, p.Index)
				in.Nodes = append(in.Nodes, snap.Node(pos))
			}
			in.Loads = benchLoads(sz.p)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := NodeAffinity(in); err != nil {
					b.Fatal(err)
				}
			}
			reportPerTask(b, sz.n)
		})
	}
}

func BenchmarkStateAssign(b *testing.B) {
	const n, p, nodes = 4096, 1024, 16
	for _, kind := range []struct {
		name string
		kind Assigner
		env  []string
	}{
		{"least_loaded", AssignLeastLoaded, nil},
		{"node_affinity", AssignNodeAffinity, benchEnvIDs(n, p)},
	} {
		b.Run(fmt.Sprintf("%s/tracked/n=%d/p=%d", kind.name, n, p), func(b *testing.B) {
			st := newBenchState(b, p, nodes)
			req := AssignRequest{Kind: kind.kind, NumTasks: n, EnvIDs: kind.env}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := st.Assign(req); err != nil {
					b.Fatal(err)
				}
			}
			reportPerTask(b, n)
		})
	}
}

func BenchmarkSelectRelease(b *testing.B) {
	ctx := context.Background()
	for _, kind := range []struct {
		name string
		kind Selector
	}{{"idle", SelectIdle}, {"idle_affinity", SelectIdleAffinity}} {
		for _, p := range []int{16, 1024} {
			b.Run(fmt.Sprintf("%s/p=%d", kind.name, p), func(b *testing.B) {
				st := newBenchState(b, p, 16)
				b.ReportAllocs()
				for b.Loop() {
					sel, err := st.Select(ctx, SelectRequest{Wait: time.Hour, Router: kind.kind, EnvID: "env-5"})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := st.Release(sel.Lease); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkSelectRoundRobin(b *testing.B) {
	ctx := context.Background()
	for _, p := range []int{16, 1024} {
		b.Run(fmt.Sprintf("p=%d", p), func(b *testing.B) {
			st := newBenchState(b, p, 16)
			envs := []string{"env-3", "env-x", "env-12", "env-999999"}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := st.Select(ctx, SelectRequest{Wait: time.Hour, Router: SelectRoundRobin, EnvID: envs[i%len(envs)]}); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkStickyPick measures the sticky stage at 1,024 policies: Home is
// the home alone (the bound's pass over the ring's policies and the ring
// walk), Select a whole /select of a session to its idle home, with the
// lease, and its release.
func BenchmarkStickyPick(b *testing.B) {
	for _, p := range []int{16, 1024} {
		keys := sessions(4096)
		b.Run(fmt.Sprintf("home/p=%d", p), func(b *testing.B) {
			st := newBenchState(b, p, 16)
			snap := st.Snapshot()
			snap.rings() // built once per registration, not per pick
			b.ReportAllocs()
			filter := Query{}
			accept := func(_ *hashRing, p int) bool { rt := snap.rts[p]; return rt.available() && filter.ok(rt) }
			i := 0
			for b.Loop() {
				st.mu.Lock()
				pos, _, _ := snap.home(sessionHash(keys[i%len(keys)]), "", false, accept)
				st.mu.Unlock()
				if pos < 0 {
					b.Fatal("no home")
				}
				i++
			}
		})
		b.Run(fmt.Sprintf("select/p=%d", p), func(b *testing.B) {
			st := newBenchState(b, p, 16)
			st.Snapshot().rings()
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sel, err := st.Select(ctx, SelectRequest{Wait: time.Hour, Session: keys[i%len(keys)]})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := st.Release(sel.Lease); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkStickyRingBuild measures building a snapshot's sticky rings
// (all policies, and each node's), which the first session after a
// registration change pays.
func BenchmarkStickyRingBuild(b *testing.B) {
	for _, p := range []int{16, 1024} {
		b.Run(fmt.Sprintf("p=%d", p), func(b *testing.B) {
			ps, topo := benchCluster(p, 16)
			b.ReportAllocs()
			for b.Loop() {
				snap, err := newSnapshot(ps, topo)
				if err != nil {
					b.Fatal(err)
				}
				snap.rings()
			}
		})
	}
}
