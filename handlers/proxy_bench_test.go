package handlers

import (
	"bufio"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/fakepolicy"
)

// BenchmarkProxy puts proxy mode side by side with direct calls to the
// same simulated policies, in one run:
//
//   - completions/c=1/instant: one request at a time to policies that
//     answer at once, for the latency the router adds (p50, p99);
//   - completions/c=64: non-streaming /v1/completions at concurrency 64
//     (ops/s is 1/ns-per-op), against policies that answer at once
//     ("instant": the router's whole cost shows, on the same two cores as
//     the 64 clients and the policies), and against 8 ms and 50 ms
//     generations (4 tokens at 500 and 80 tokens/s);
//   - first-chunk: the time to the first event of a streamed chat
//     completion, one at a time;
//   - streams=1000: 1,000 streams held open at once, and the memory they
//     take (heap and stacks of this process, which holds the clients and
//     the policies too: the proxy's own share is the difference of the
//     two sides).
//
// go test -run '^$' -bench Proxy -count 3 ./handlers
func BenchmarkProxy(b *testing.B) {
	fast := benchFleet(b, 0)   // answers at once
	gen := benchFleet(b, 500)  // 4 tokens in 8 ms
	slow := benchFleet(b, 80)  // 4 tokens in 50 ms
	paced := benchFleet(b, 50) // 50 tokens/s: streams last
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 0, MaxIdleConnsPerHost: 1024, MaxConnsPerHost: 0}}
	b.Cleanup(client.CloseIdleConnections)
	direct := func(f *fakepolicy.Fleet) func(i int) string {
		return func(i int) string { return f.URL(i % f.Len()) }
	}
	routed := func(f *fakepolicy.Fleet) func(int) string {
		srv := proxyServer(b, Config{}, 2000, f.URLs()...)
		return func(int) string { return srv.URL }
	}
	sides := []struct {
		name                   string
		fast, gen, slow, paced func(int) string
	}{
		{"direct", direct(fast), direct(gen), direct(slow), direct(paced)},
		{"proxy", routed(fast), routed(gen), routed(slow), routed(paced)},
	}
	for _, c := range []struct {
		name string
		conc int
		url  func(side int) func(int) string
	}{
		{"c=1/instant", 1, func(i int) func(int) string { return sides[i].fast }},
		{"c=64/instant", 64, func(i int) func(int) string { return sides[i].fast }},
		{"c=64/8ms", 64, func(i int) func(int) string { return sides[i].gen }},
		{"c=64/50ms", 64, func(i int) func(int) string { return sides[i].slow }},
	} {
		for i, side := range sides {
			b.Run("completions/"+c.name+"/"+side.name, func(b *testing.B) {
				benchCompletions(b, client, c.url(i), c.conc)
			})
		}
	}
	for _, side := range sides {
		b.Run("first-chunk/"+side.name, func(b *testing.B) {
			benchFirstChunk(b, client, side.paced)
		})
	}
	for _, side := range sides {
		b.Run("streams=1000/"+side.name, func(b *testing.B) {
			benchStreams(b, client, side.paced, 1000)
		})
	}
}

// benchFleet is four simulated policies on their own listeners; tps 0
// answers generations at once.
func benchFleet(tb testing.TB, tps float64) *fakepolicy.Fleet {
	tb.Helper()
	opts := fakepolicy.Options{PerPolicyListeners: true, TokensPerSecond: tps}
	if tps == 0 {
		opts.TokensPerSecond = 1e12
	}
	f, err := fakepolicy.New(4, rand.NewPCG(1, 2), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return f
}

const completionBody = `{"model":"fake-policy","prompt":"hi","max_tokens":4}`

func benchCompletions(b *testing.B, client *http.Client, url func(int) string, conc int) {
	if conc == 1 {
		lat := make([]time.Duration, 0, b.N)
		for i := range b.N {
			start := time.Now()
			postCompletion(b, client, url(i))
			lat = append(lat, time.Since(start))
		}
		reportQuantiles(b, lat, "")
		return
	}
	b.SetParallelism(max(conc/runtime.GOMAXPROCS(0), 1))
	var mu sync.Mutex
	var lat []time.Duration
	var seq int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		mu.Lock()
		seq++
		i := int(seq)
		mu.Unlock()
		for pb.Next() {
			start := time.Now()
			postCompletion(b, client, url(i))
			mine = append(mine, time.Since(start))
			i++
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	reportQuantiles(b, lat, "")
}

// postCompletion sends one non-streaming completion and reads its answer.
func postCompletion(b *testing.B, client *http.Client, base string) {
	res, err := client.Post(base+"/v1/completions", "application/json", strings.NewReader(completionBody))
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b.Fatalf("status %d", res.StatusCode)
	}
}

func benchFirstChunk(b *testing.B, client *http.Client, url func(int) string) {
	var lat []time.Duration
	for i := range b.N {
		start := time.Now()
		res, rd := openStream(b, context.Background(), client, url(i))
		if _, err := rd.ReadString('\n'); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		res.Body.Close() // leaving cancels the rest

	}
	reportQuantiles(b, lat, "first-")
}

// benchStreams holds n streams open at once and reports the memory the
// process took for them.
func benchStreams(b *testing.B, client *http.Client, url func(int) string, n int) {
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		ctx, cancel := context.WithCancel(context.Background())
		var opened sync.WaitGroup
		bodies := make([]io.Closer, n)
		for i := range n {
			opened.Go(func() {
				res, rd := openStream(b, ctx, client, url(i))
				if _, err := rd.ReadString('\n'); err != nil {
					b.Error(err)
				}
				bodies[i] = res.Body
			})
		}
		opened.Wait()
		runtime.GC()
		runtime.ReadMemStats(&after)
		used := float64(after.HeapInuse+after.StackInuse) - float64(before.HeapInuse+before.StackInuse)
		b.ReportMetric(used/float64(n)/1024, "KiB/stream")
		cancel()
		for _, c := range bodies {
			if c != nil {
				c.Close()
			}
		}
	}
}

// openStream starts a long streamed chat completion (200 tokens).
func openStream(tb testing.TB, ctx context.Context, client *http.Client, base string) (*http.Response, *bufio.Reader) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"fake-policy","stream":true,"max_tokens":200,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		tb.Fatalf("status %d: %s", res.StatusCode, body)
	}
	return res, bufio.NewReader(res.Body)
}

func reportQuantiles(b *testing.B, lat []time.Duration, prefix string) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(q(0.5), prefix+"p50-µs")
	b.ReportMetric(q(0.99), prefix+"p99-µs")
}
