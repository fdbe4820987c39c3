package main

import (
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/fakepolicy"
)

// seq returns the token ids from..to-1.
func seq(from, to int64) []int64 {
	var out []int64
	for t := from; t < to; t++ {
		out = append(out, t)
	}
	return out
}

func TestRadixTreeMatch(t *testing.T) {
	root := newRadixNode(nil)
	root.tenants[0], root.tenants[1], root.tenants[2] = struct{}{}, struct{}{}, struct{}{}
	root.insert([]int64{1, 2, 3, 4}, 2)
	root.insert([]int64{1, 2, 5}, 1) // splits [1 2 3 4] at 2
	for _, tc := range []struct {
		name         string
		text         []int64
		wantN, wantT int
	}{
		{"whole path and more", []int64{1, 2, 3, 4, 9}, 4, 2},
		{"the split node: its first tenant", []int64{1, 2, 7}, 2, 1},
		{"the other branch", []int64{1, 2, 5, 6}, 3, 1},
		{"into a node in part", []int64{1, 2, 3, 8}, 3, 2},
		{"nothing: the root's first tenant", []int64{9}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, tenant := root.prefixMatch(tc.text)
			if n != tc.wantN || tenant != tc.wantT {
				t.Errorf("prefixMatch(%v) = %d, %d; want %d, %d", tc.text, n, tenant, tc.wantN, tc.wantT)
			}
		})
	}
}

func TestCacheAwareRules(t *testing.T) {
	shared := seq(0, 100)
	for _, tc := range []struct {
		name  string
		loads []int
		sent  []int64 // sent first to worker 2, with the loads below
		ask   []int64
		want  int
	}{
		{"empty tree: least loaded", []int{3, 1, 2}, nil, seq(0, 10), 1},
		{"least loaded ties to the first", []int{0, 0, 0}, nil, seq(0, 10), 0},
		{"match rate above 0.3 wins over load", []int{0, 0, 40}, shared, append(slices.Clone(shared), seq(1000, 1100)...), 2},
		{"match rate at or below 0.3: least loaded", []int{5, 0, 0}, shared, append(slices.Clone(shared), seq(1000, 1300)...), 1},
		{"imbalanced (max - min > 64, max > 1.5 min): least loaded", []int{10, 80, 90}, shared, shared, 0},
		{"max - min > 64 but max <= 1.5 min: balanced", []int{230, 240, 300}, shared, shared, 2},
		{"max > 1.5 min but max - min <= 64: balanced", []int{0, 0, 64}, shared, shared, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCacheAware(3)
			if tc.sent != nil {
				c.root.insert(tc.sent, 2)
			}
			copy(c.loads, tc.loads)
			if got := c.pick(tc.ask); got != tc.want {
				t.Errorf("pick = %d, want %d", got, tc.want)
			}
			before := tc.loads[tc.want]
			if c.loads[tc.want] != before+1 {
				t.Errorf("load of %d = %d, want %d", tc.want, c.loads[tc.want], before+1)
			}
			c.done(tc.want)
			if n, tenant := c.root.prefixMatch(tc.ask); n != len(tc.ask) || tenant > tc.want {
				t.Errorf("after pick, prefixMatch = %d, %d; want the whole prompt recorded for %d", n, tenant, tc.want)
			}
		})
	}
}

var testShape = workloadShape{
	Episodes: 3, Turns: 3, FirstTokens: 40, ObsTokens: 20, OutTokens: 8,
	Groups: 5, GroupSize: 8, GroupPrompt: 64, GroupsInFlight: 2,
	Clients: 3, PerClient: 2, UniqueTokens: 50, SystemTokens: 64, SuffixTokens: 16, ShortOut: 4,
}

func TestWorkloadsDeterministic(t *testing.T) {
	for _, name := range prefixWorkloadNames {
		t.Run(name, func(t *testing.T) {
			a, err := makeWorkload(name, testShape, 7)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := makeWorkload(name, testShape, 7)
			if !reflect.DeepEqual(a, b) {
				t.Error("the same seed made two workloads")
			}
			c, _ := makeWorkload(name, testShape, 8)
			if reflect.DeepEqual(a, c) {
				t.Error("another seed made the same workload")
			}
		})
	}
	if _, err := makeWorkload("nope", testShape, 1); err == nil {
		t.Error("unknown workload accepted")
	}
}

func TestWorkloadShapes(t *testing.T) {
	mt, _ := makeWorkload(wlMultiTurn, testShape, 1)
	if len(mt.Clients) != testShape.Episodes {
		t.Fatalf("%d episodes, want %d", len(mt.Clients), testShape.Episodes)
	}
	for _, c := range mt.Clients {
		for i := 1; i < len(c.Units); i++ {
			prev, cur := c.Units[i-1].Requests[0], c.Units[i].Requests[0]
			out, _ := fakepolicy.Continuation(prev.Prompt, prev.MaxNew)
			want := slices.Concat(prev.Prompt, out)
			if !slices.Equal(cur.Prompt[:len(want)], want) || len(cur.Prompt) != len(want)+testShape.ObsTokens {
				t.Fatalf("turn %d does not resend turn %d's prompt and output and add the observation", i, i-1)
			}
			if cur.Session != prev.Session {
				t.Fatal("an episode's turns have different sessions")
			}
		}
	}
	g, _ := makeWorkload(wlGRPO, testShape, 1)
	if len(g.Clients) != testShape.GroupsInFlight || g.requests() != testShape.Groups*testShape.GroupSize {
		t.Fatalf("grpo: %d clients, %d requests", len(g.Clients), g.requests())
	}
	for _, c := range g.Clients {
		for _, u := range c.Units {
			for _, r := range u.Requests {
				if !slices.Equal(r.Prompt, u.Requests[0].Prompt) || r.Session != u.Requests[0].Session {
					t.Fatal("a group's samples differ in prompt or session")
				}
			}
		}
	}
	h, _ := makeWorkload(wlHotSystem, testShape, 1)
	first := h.Clients[0].Units[0].Requests[0].Prompt
	for _, c := range h.Clients {
		for _, u := range c.Units {
			p := u.Requests[0].Prompt
			if len(p) != testShape.SystemTokens+testShape.SuffixTokens || !slices.Equal(p[:testShape.SystemTokens], first[:testShape.SystemTokens]) {
				t.Fatal("a hot-system request does not start with the system prompt")
			}
		}
	}
	if h.requests() != testShape.Clients*testShape.PerClient {
		t.Fatalf("hotsystem: %d requests", h.requests())
	}
}

func TestMaxOnOne(t *testing.T) {
	for _, tc := range []struct {
		on   []int
		want int
	}{
		{[]int{1, 1, 1, 1, 1, 1, 2, 3}, 6},
		{[]int{0, 1, 2, 3, 0, 1, 2, 3}, 2},
		{[]int{-1, -1, 2}, 1},
		{nil, 0},
	} {
		if got := maxOnOne(tc.on); got != tc.want {
			t.Errorf("maxOnOne(%v) = %d, want %d", tc.on, got, tc.want)
		}
	}
}

func TestParsePrefixConfig(t *testing.T) {
	c, err := parsePrefixConfig([]string{"-proxy", "-workloads", "grpo", "-reps", "2"}, io.Discard)
	if err != nil || !c.Proxy || !slices.Equal(c.Workloads, []string{wlGRPO}) || c.Reps != 2 {
		t.Fatalf("got %+v, %v", c, err)
	}
	for _, args := range [][]string{{"-workloads", "nope"}, {"-reps", "0"}, {"-groups-in-flight", "0"}, {"extra"}} {
		if _, err := parsePrefixConfig(args, io.Discard); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}

func TestCacheAwareGateway(t *testing.T) {
	fleet, err := fakepolicy.New(2, rand.NewPCG(1, 1), fakepolicy.Options{
		Engine: fakepolicy.EngineSGLang, PerPolicyListeners: true, KVTokens: 4096, TokensPerSecond: 1e6,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	g, err := startCacheAwareGateway(fleet.URLs(), transport)
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()

	send := func(tb testing.TB, prompt []int64) (int, genAnswer) {
		tb.Helper()
		ans, h, err := generate(t.Context(), hc, g.url, prefixRequest{Prompt: prompt, MaxNew: 4}, nil)
		if err != nil {
			tb.Fatal(err)
		}
		i, err := strconv.Atoi(h.Get(gatewayWorkerHeader))
		if err != nil {
			tb.Fatalf("answer without %s: %v", gatewayWorkerHeader, err)
		}
		return i, ans
	}
	shared := seq(0, 64)
	first, ans := send(t, shared)
	if ans.Meta.PromptTokens != len(shared) || ans.Meta.CachedTokens != 0 {
		t.Errorf("first request: prompt %d, cached %d; want %d, 0", ans.Meta.PromptTokens, ans.Meta.CachedTokens, len(shared))
	}
	again, ans := send(t, slices.Concat(shared, seq(100, 116)))
	if again != first || ans.Meta.CachedTokens != len(shared) {
		t.Errorf("a prompt extending the first went to %d with %d cached; want %d with %d", again, ans.Meta.CachedTokens, first, len(shared))
	}
	g.rule.mu.Lock()
	loads := slices.Clone(g.rule.loads)
	g.rule.mu.Unlock()
	if !slices.Equal(loads, []int{0, 0}) {
		t.Errorf("loads after the answers = %v, want none in flight", loads)
	}

	resp, err := hc.Post(g.url+"/generate", "application/json", strings.NewReader("{"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a body that is not JSON: %d, want 400", resp.StatusCode)
	}
}
