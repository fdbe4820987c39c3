package routing

import (
	"context"
	"fmt"
	"testing"
)

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
			i := 0
			for b.Loop() {
				st.mu.Lock()
				pos, _ := st.homeLocked(snap, sessionHash(keys[i%len(keys)]), "", false, DefaultLoadFactor)
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
				sel, err := st.Select(ctx, SelectRequest{Session: keys[i%len(keys)]})
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
