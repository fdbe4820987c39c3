package prefix

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
)

// chain returns the hashes of a prompt of n blocks whose ids start at
// from: prompts of the same from share their common blocks.
func chain(from, n int) []Hash {
	ids := make([]uint32, n*BlockTokens)
	for i := range ids {
		ids[i] = uint32(from + i)
	}
	return TokenHashes(ids, 0)
}

func match(x *Index, hs []Hash, id string) Match { return x.Match(hs, []string{id}, nil)[0] }

func TestIndexPendingConfirmed(t *testing.T) {
	x := NewIndex(Options{Stride: 1})
	a := chain(0, 8)
	x.RecordPending("p0", a[:5])
	tests := []struct {
		name string
		do   func()
		id   string
		want Match
	}{
		{"pending at dispatch", func() {}, "p0", Match{Confirmed: 0, Pending: 5}},
		{"unknown policy", func() {}, "p9", Match{}},
		{"confirmed by the answer", func() { x.Confirm("p0", a[:5], -1) }, "p0", Match{5, 5}},
		{"a longer chain pending beyond", func() { x.RecordPending("p0", a) }, "p0", Match{5, 8}},
		{"another policy", func() { x.Add("p1", a[:2]) }, "p1", Match{2, 2}},
		{"dropped pending of a failure", func() { x.DropPending("p0", a) }, "p0", Match{5, 5}},
	}
	for _, tt := range tests {
		tt.do()
		if got := match(x, a, tt.id); got != tt.want {
			t.Errorf("%s: %s matches %+v, want %+v", tt.name, tt.id, got, tt.want)
		}
	}
	// Match reports by the ids given, in their order.
	got := x.Match(a, []string{"p1", "nobody", "p0"}, nil)
	want := []Match{{2, 2}, {}, {5, 5}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Match = %v, want %v", got, want)
	}
	// A chain whose first block differs matches nothing.
	if got := match(x, chain(1000, 8), "p0"); got != (Match{}) {
		t.Errorf("another prompt matches %+v", got)
	}
	// A hole breaks the prefix: blocks after it do not count.
	x.Clear("p1")
	x.Add("p1", []Hash{a[0], a[1], a[3]})
	if got := match(x, a, "p1"); got != (Match{2, 2}) {
		t.Errorf("with a hole: %+v, want {2 2}", got)
	}
	// A pending block inside a confirmed prefix ends Confirmed, not Pending.
	x.Clear("p1")
	x.Add("p1", a[:1])
	x.RecordPending("p1", a[:3])
	x.Add("p1", a[2:3])
	if got := match(x, a, "p1"); got != (Match{1, 3}) {
		t.Errorf("pending in the middle: %+v, want {1 3}", got)
	}
}

func TestIndexLRUEviction(t *testing.T) {
	x := NewIndex(Options{Stride: 1})
	x.SetCapacity("p", 10*BlockTokens)
	a, b := chain(0, 6), chain(5000, 6)
	x.Add("p", a)
	x.Add("p", b) // 12 blocks: the 2 least recent go, a's deepest
	if got := match(x, a, "p"); got != (Match{4, 4}) {
		t.Errorf("a after b: %+v, want its first 4 blocks", got)
	}
	if got := match(x, b, "p"); got != (Match{6, 6}) {
		t.Errorf("b: %+v, want all 6", got)
	}
	x.RecordPending("p", a[:1]) // a's first block most recent
	x.Add("p", chain(9000, 5))  // 15 blocks: 5 go, b's deepest first
	if got := match(x, a, "p"); got.Pending != 1 {
		t.Errorf("a's touched first block: %+v", got)
	}
	st := x.Stats()
	if len(st.Policies) != 1 || st.Policies[0].IndexedTokens != 10*BlockTokens || st.Policies[0].Evictions != 7 {
		t.Errorf("stats %+v: want 10 blocks indexed and 7 evictions", st.Policies)
	}
	// A longer chain than the budget keeps its first blocks.
	y := NewIndex(Options{Stride: 1, DefaultTokens: 3 * BlockTokens})
	y.RecordPending("q", a)
	if got := match(y, a, "q"); got != (Match{0, 3}) {
		t.Errorf("chain over budget: %+v, want its first 3 pending", got)
	}
	// Shrinking the budget evicts at once.
	x.SetCapacity("p", 2*BlockTokens)
	if st := x.Stats(); st.Policies[0].IndexedTokens != 2*BlockTokens || st.Policies[0].CapacityTokens != 2*BlockTokens {
		t.Errorf("after SetCapacity: %+v", st.Policies[0])
	}
}

func TestIndexByteCap(t *testing.T) {
	perBlock := int64(entryBytes + mapBytes)
	x := NewIndex(Options{Stride: 1, MaxBytes: 20 * perBlock})
	x.Add("big", chain(0, 15))
	x.Add("small", chain(7000, 4))
	x.Add("small", chain(8000, 4)) // 23 blocks: the biggest policy pays
	st := x.Stats()
	if st.IndexBytes > st.MaxBytes {
		t.Errorf("index bytes %d over the cap %d", st.IndexBytes, st.MaxBytes)
	}
	by := map[string]PolicyStats{}
	for _, p := range st.Policies {
		by[p.ID] = p
	}
	if by["small"].IndexedTokens != 8*BlockTokens || by["big"].IndexedTokens != 12*BlockTokens || by["big"].Evictions != 3 {
		t.Errorf("stats %+v: want small whole and big cut to 12 blocks", by)
	}
	// A block held by two policies is stored once: bytes grow by an entry.
	before := x.Stats().IndexBytes
	x.Clear("small")
	x.Add("small", chain(0, 2))
	if got := x.Stats(); got.Blocks != 12 || got.Entries != 14 || got.IndexBytes >= before {
		t.Errorf("shared blocks: %d blocks, %d entries, %d bytes (before %d)", got.Blocks, got.Entries, got.IndexBytes, before)
	}
}

func TestIndexConfirmCutBack(t *testing.T) {
	a := chain(0, 6)
	tests := []struct {
		name      string
		cached    int
		wantOther int // blocks of the other chain left
		wantClear uint64
	}{
		{"as expected", 4 * BlockTokens, 3, 0},
		{"unknown", -1, 3, 0},
		{"more than expected", 6 * BlockTokens, 3, 0},
		{"the last token computed again (SGLang)", 4*BlockTokens - 1, 3, 0},
		{"the last block computed again (vLLM)", 3 * BlockTokens, 3, 0},
		{"two blocks short", 1*BlockTokens + 5, 1, 0},
		{"flushed behind the router's back", 3, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := NewIndex(Options{Stride: 1})
			other := chain(5000, 3)
			x.Add("p", other)       // least recent
			x.Add("p", a[:4])       // the index expects 4 blocks of a
			x.RecordPending("p", a) // dispatch
			x.Confirm("p", a, tt.cached)
			if got := match(x, a, "p"); got != (Match{6, 6}) {
				t.Errorf("the chain after its answer: %+v, want all 6 confirmed", got)
			}
			if got := match(x, other, "p"); got.Confirmed != tt.wantOther {
				t.Errorf("the other chain: %+v, want %d blocks", got, tt.wantOther)
			}
			if got := x.Stats().Policies[0].Clears; got != tt.wantClear {
				t.Errorf("clears %d, want %d", got, tt.wantClear)
			}
		})
	}
}

func TestIndexClearRemove(t *testing.T) {
	x := NewIndex(Options{Stride: 1})
	a := chain(0, 4)
	x.SetCapacity("p0", 100*BlockTokens)
	x.Add("p0", a)
	x.Add("p1", a)
	x.Clear("p0")
	if got := x.Match(a, []string{"p0", "p1"}, nil); got[0] != (Match{}) || got[1] != (Match{4, 4}) {
		t.Errorf("after Clear(p0): %v", got)
	}
	if st := x.Stats(); st.Blocks != 4 || st.Entries != 4 {
		t.Errorf("after Clear: %d blocks, %d entries; want 4, 4", st.Blocks, st.Entries)
	}
	for _, p := range x.Stats().Policies {
		if p.ID == "p0" && p.CapacityTokens != 100*BlockTokens {
			t.Errorf("Clear lost the budget: %+v", p)
		}
	}
	x.Remove("p1")
	if st := x.Stats(); st.Blocks != 0 || st.Entries != 0 || st.IndexBytes != 0 || len(st.Policies) != 1 {
		t.Errorf("after Remove(p1): %+v", st)
	}
	// A removed policy's slot is reused without its blocks.
	x.Add("p2", a[:1])
	if got := x.Match(a, []string{"p1", "p2"}, nil); got[0] != (Match{}) || got[1] != (Match{1, 1}) {
		t.Errorf("after reuse: %v", got)
	}
	x.Remove("nobody")
	x.Clear("nobody")
	x.DropPending("nobody", a)
}

// TestIndexConcurrent exercises every operation from several goroutines,
// for the race detector, and checks the bookkeeping after.
func TestIndexConcurrent(t *testing.T) {
	x := NewIndex(Options{Stride: 1, DefaultTokens: 64 * BlockTokens, MaxBytes: 300 * (entryBytes + mapBytes)})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			id := "p" + strconv.Itoa(g)
			ids := []string{"p0", "p1", "p2", "p3"}
			var out []Match
			for i := range 300 {
				hs := chain(i%7*1000, 1+i%20)
				out = x.Match(hs, ids, out)
				x.RecordPending(id, hs)
				switch i % 10 {
				case 3:
					x.DropPending(id, hs)
				case 7:
					x.Clear(id)
				case 9:
					x.SetCapacity(id, (i%50)*BlockTokens)
				default:
					x.Confirm(id, hs, i%5*BlockTokens-1)
				}
				_ = x.Stats()
			}
		})
	}
	wg.Wait()
	st := x.Stats()
	var tokens int64
	for _, p := range st.Policies {
		tokens += p.IndexedTokens
		if p.IndexedTokens > p.CapacityTokens {
			t.Errorf("%s over its budget: %+v", p.ID, p)
		}
	}
	if tokens != int64(st.Entries)*BlockTokens || st.IndexBytes > st.MaxBytes {
		t.Errorf("stats disagree: %+v", st)
	}
}

// TestMemoryPerBlock measures the heap an indexed block costs, the figure
// of Index's documentation, and holds it to a bound.
func TestMemoryPerBlock(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about 100 MB")
	}
	const n = 1 << 21 // blocks: 512k entries of 4
	hs := make([]Hash, n)
	for i := range hs {
		hs[i] = Hash(uint64(i)*0x9e3779b97f4a7c15 + 1)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	x := NewIndex(Options{DefaultTokens: 2 * n * BlockTokens, MaxBytes: 1 << 40})
	k := float64(x.Stride()) // blocks an entry stands for
	for i := 0; i < n; i += 1024 {
		x.Add("p0", hs[i:i+1024])
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	one := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	const others = 2 // further policies holding the same blocks
	for p := range others {
		for i := 0; i < n; i += 1024 {
			x.Add("p"+strconv.Itoa(p+1), hs[i:i+1024])
		}
	}
	runtime.GC()
	var shared runtime.MemStats
	runtime.ReadMemStats(&shared)
	more := float64(int64(shared.HeapAlloc)-int64(after.HeapAlloc)) / n / others
	t.Logf("heap per indexed block: %.1f bytes held by one policy, %.1f bytes per further policy", one, more)
	t.Logf("64 engines × 2M tokens = %d blocks: %.0f MB unshared", 64*(2<<20)/BlockTokens, one*64*(2<<20)/BlockTokens/1e6)
	t.Logf("an entry (a step of %.0f blocks): %.1f bytes held by one policy, %.1f bytes per further policy", k, one*k, more*k)
	if one*k > 110 || more*k > 40 {
		t.Errorf("an indexed entry costs %.1f bytes (%.1f per further policy), above the 110 (40) documented", one*k, more*k)
	}
	runtime.KeepAlive(x)
}

func BenchmarkMatch(b *testing.B) {
	for _, np := range []int{8, 64} {
		x := NewIndex(Options{})
		ids := make([]string, np)
		hot := chain(0, 512) // 8k tokens
		for i := range ids {
			ids[i] = "policy-" + strconv.Itoa(i)
			x.Add(ids[i], hot[:64]) // a shared system prompt of 1k tokens
			x.Add(ids[i], chain(100000*(i+1), 512))
		}
		x.Add(ids[np/2], hot) // one policy holds the whole prompt
		b.Run("policies="+strconv.Itoa(np), func(b *testing.B) {
			b.ReportAllocs()
			out := make([]Match, np)
			for b.Loop() {
				out = x.Match(hot, ids, out)
			}
			if out[np/2].Confirmed != 512 {
				b.Fatalf("match %+v", out[np/2])
			}
		})
	}
}

func BenchmarkRecord(b *testing.B) {
	x := NewIndex(Options{DefaultTokens: 1 << 16})
	hs := chain(0, 512)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		id := "policy-" + strconv.Itoa(i%64)
		x.RecordPending(id, hs)
		x.Confirm(id, hs, -1)
		i++
	}
}

// BenchmarkRecordUnique: prompts that share nothing, 8k tokens each, over
// 8 policies at their budget, so that every record evicts as many blocks
// as it adds (the index's steady state under traffic without reuse), by
// blocks (stride 1) and by the default steps.
func BenchmarkRecordUnique(b *testing.B) {
	for _, stride := range []int{1, DefaultStride} {
		b.Run("stride="+strconv.Itoa(stride), func(b *testing.B) {
			x := NewIndex(Options{Stride: stride, DefaultTokens: 1 << 20})
			b.ReportAllocs()
			hs := make([]Hash, 512)
			i := 0
			for b.Loop() {
				id := "policy-" + strconv.Itoa(i%8)
				for j := range hs {
					hs[j] = Hash(uint64(i*512+j+1) * 0x9e3779b97f4a7c15) // distinct, spread
				}
				x.RecordPending(id, hs)
				x.Confirm(id, hs, -1)
				i++
			}
		})
	}
}
