package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/client"
	"github.com/policyrouter/policyrouter/internal/etcdtest"
	"github.com/policyrouter/policyrouter/internal/poll"
)

// heldPolicy is a capacity-1 policy server that answers /idle busy while a
// client holds it (between its POST /hold and POST /unhold) and keeps its
// own count of clients holding it at once.
type heldPolicy struct {
	srv     *httptest.Server
	holders atomic.Int32
	maxHeld atomic.Int32
}

func newHeldPolicy(tb testing.TB) *heldPolicy {
	p := &heldPolicy{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/idle":
			fmt.Fprintf(w, `{"idle": %t}`, p.holders.Load() == 0)
		case "/hold":
			n := p.holders.Add(1)
			for m := p.maxHeld.Load(); n > m && !p.maxHeld.CompareAndSwap(m, n); m = p.maxHeld.Load() {
			}
		case "/unhold":
			p.holders.Add(-1)
		case "/generate":
			var req struct{ MS int }
			_ = json.NewDecoder(r.Body).Decode(&req)
			time.Sleep(time.Duration(req.MS) * time.Millisecond)
		default:
			http.NotFound(w, r)
		}
	}))
	tb.Cleanup(p.srv.Close)
	return p
}

// hold is one client's use of one policy: from the moment the router's
// /select answer arrived to the moment the client sent /release.
type hold struct {
	client, index int
	from, to      time.Time
	replica       string
}

// haCluster is the test's view of the router replicas: the live ones'
// URLs and which one is believed to lead.
type haCluster struct {
	mu     sync.Mutex
	urls   []string
	leader string
}

func (c *haCluster) snapshot() (urls []string, leader string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.urls), c.leader
}

func (c *haCluster) setLeader(u string) {
	c.mu.Lock()
	c.leader = u
	c.mu.Unlock()
}

func (c *haCluster) replace(old, new string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.urls = slices.DeleteFunc(c.urls, func(u string) bool { return u == old })
	if new != "" {
		c.urls = append(c.urls, new)
	}
}

// startReplicas starts an embedded etcd and n `serve --store etcd`
// processes on it under prefix. It returns their arguments (for
// startReplica), the processes by URL and the cluster view.
func startReplicas(t *testing.T, n int, prefix, leaderTTL, pollInterval string) ([]string, map[string]*proc, *haCluster) {
	t.Helper()
	etcd := etcdtest.Start(t)
	args := []string{"serve", "--store", "etcd", "--etcd-endpoints", etcd.Endpoint, "--etcd-prefix", prefix,
		"--leader-ttl", leaderTTL, "--poll-interval", pollInterval, "--addr", "127.0.0.1:0"}
	procs := map[string]*proc{}
	cl := &haCluster{}
	for range n {
		startReplica(t, args, procs, cl)
	}
	return args, procs, cl
}

// startReplica starts one more replica with args and adds it to procs and
// cl; it returns its URL.
func startReplica(t *testing.T, args []string, procs map[string]*proc, cl *haCluster) string {
	t.Helper()
	p := start(t, nil, args...)
	u := "http://" + p.addr
	procs[u] = p
	cl.replace("", u)
	return u
}

// haClient is a short-timeout HTTP client: a killed replica refuses
// connections at once, and nothing the test sends should take long.
var haClient = &http.Client{Timeout: 10 * time.Second}

// haPost posts body as JSON and returns the status and the body. It is
// for registrations, whose exact status (201) is the acknowledgement
// counted, and for the test's policy servers; the routing requests go
// through the shared client.
func haPost(url string, body any) (int, string, error) {
	b, _ := json.Marshal(body)
	resp, err := haClient.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw), nil
}

// errNoRoute is routeOnLeader's error when no replica routed the request.
var errNoRoute = errors.New("no replica routed the request: each was gone or not the leader")

// routeOnLeader calls route with a client of the replica believed to
// lead, follows not_leader to the leader named, and on connection errors
// tries the other live replicas. It returns the replica that answered and
// route's error (nil, or a *client.Error other than not_leader), or
// errNoRoute when none routed it in this round.
func (c *haCluster) routeOnLeader(route func(*client.Client) error) (string, error) {
	urls, leader := c.snapshot()
	tried := map[string]bool{}
	next := leader
	for range 2 * len(urls) {
		if next == "" || tried[next] {
			next = ""
			for _, u := range urls {
				if !tried[u] {
					next = u
					break
				}
			}
			if next == "" {
				return "", errNoRoute
			}
		}
		tried[next] = true
		err := route(client.New(next, haClient))
		var ce *client.Error
		if err != nil && !errors.As(err, &ce) {
			continue // dead or gone: another replica
		}
		if ce != nil && ce.Code == api.CodeNotLeader {
			if ce.Leader != "" && !tried[ce.Leader] {
				c.setLeader(ce.Leader)
				next = ce.Leader
			} else {
				next = ""
			}
			continue
		}
		c.setLeader(next)
		return next, err
	}
	return "", errNoRoute
}

// TestHAFailover runs three router replicas on one etcd under select and
// release load and a stream of registrations, SIGKILLs the leader five
// times (starting a replacement after each), and checks that no
// acknowledged registration is lost, that no capacity-1 policy is ever
// held by two clients at once, that a new leader routes within a generous
// bound each time, and that the dead leader's leases are void on the new
// one. It logs the fail-over times.
func TestHAFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("three router processes and five leader kills")
	}
	const (
		kills        = 5
		nPolicies    = 6
		loadClients  = 4
		leaderTTL    = "2s"
		pollInterval = "100ms"
		failoverMax  = 20 * time.Second
	)
	args, procs, cl := startReplicas(t, 3, "/ha-e2e/", leaderTTL, pollInterval)
	ctx := context.Background()

	// The policies clients hold, registered through a follower.
	policies := make([]*heldPolicy, nPolicies)
	for i := range policies {
		policies[i] = newHeldPolicy(t)
	}
	leader := waitLeader(t, cl)
	var follower string
	for _, u := range cl.urls {
		if u != leader {
			follower = u
			break
		}
	}
	var acked sync.Map // policy id -> true, for registrations answered 201
	for i, p := range policies {
		id := fmt.Sprintf("held-%d", i)
		code, body, err := haPost(follower+"/policies", map[string]any{"url": p.srv.URL, "index": i, "id": id, "capacity": 1})
		if err != nil || code != http.StatusCreated {
			t.Fatalf("register %s on a follower: %d %s %v", id, code, body, err)
		}
		acked.Store(id, true)
	}

	// Registrations keep coming, on whichever replica answers. Their
	// policies always answer busy, so they are never handed out.
	busyPolicy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"idle": false}`)
	}))
	t.Cleanup(busyPolicy.Close)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var registered atomic.Int64
	wg.Go(func() {
		for n, r := 0, 0; ; n++ {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			urls, _ := cl.snapshot()
			id := fmt.Sprintf("bg-%d", n)
			body := map[string]any{"url": fmt.Sprintf("%s/bg/%d", busyPolicy.URL, n), "id": id, "capacity": 1}
			for range len(urls) {
				code, _, err := haPost(urls[r%len(urls)]+"/policies", body)
				if err == nil && code == http.StatusCreated {
					acked.Store(id, true)
					registered.Add(1)
					break
				}
				r++ // a dead replica, or an error: the next one, with a new id
				n++
				id = fmt.Sprintf("bg-%d", n)
				body = map[string]any{"url": fmt.Sprintf("%s/bg/%d", busyPolicy.URL, n), "id": id, "capacity": 1}
			}
		}
	})

	// Clients select on the leader, hold the policy while they send it
	// work, and release it. One hold in five is long enough to span a
	// leader's death and its successor's first probes.
	var (
		holdsMu   sync.Mutex
		holds     []hold
		selects   atomic.Int64
		leasesMu  sync.Mutex
		lastLease = map[string]string{} // replica -> a lease it handed out
	)
	// use holds the policy sel names while sending it work: the policy
	// answers busy from just after the /select answer to just before the
	// /release is sent, which are the ends of the hold recorded. The hold
	// ends before the release so that the policy's own count of holders
	// never includes a client that has given it back.
	use := func(holder int, sel api.SelectResponse, replica string, from time.Time, work time.Duration) {
		p := policies[sel.Index]
		_, _, _ = haPost(p.srv.URL+"/hold", nil)
		_, _, _ = haPost(p.srv.URL+"/generate", map[string]any{"ms": work.Milliseconds()})
		to := time.Now()
		holdsMu.Lock()
		holds = append(holds, hold{client: holder, index: sel.Index, from: from, to: to, replica: replica})
		holdsMu.Unlock()
		_, _, _ = haPost(p.srv.URL+"/unhold", nil)
		if sel.LeaseID != "" {
			// Released on whichever replica leads now; the dead leader's
			// leases answer released false there.
			_, _ = cl.routeOnLeader(func(rc *client.Client) error {
				_, err := rc.Release(ctx, sel.LeaseID)
				return err
			})
		}
	}
	for c := range loadClients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				var sel api.SelectResponse
				replica, err := cl.routeOnLeader(func(rc *client.Client) (err error) {
					sel, err = rc.Select(ctx, api.SelectRequest{Router: "simple", TimeoutMS: new(300)})
					return err
				})
				from := time.Now()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				selects.Add(1)
				if sel.LeaseID != "" {
					leasesMu.Lock()
					lastLease[replica] = sel.LeaseID
					leasesMu.Unlock()
				}
				work := time.Duration(20+rng.IntN(130)) * time.Millisecond
				if rng.IntN(5) == 0 {
					work = time.Duration(1000+rng.IntN(2000)) * time.Millisecond
				}
				use(c, sel, replica, from, work)
			}
		})
	}

	var failovers []time.Duration
	var takeovers []time.Time // when each new leader first routed
	for k := range kills {
		time.Sleep(500 * time.Millisecond) // load under this leader
		leader := waitLeader(t, cl)
		leasesMu.Lock()
		oldLease := lastLease[leader]
		leasesMu.Unlock()
		victim := procs[leader]
		killed := time.Now()
		_ = victim.cmd.Process.Kill()
		cl.replace(leader, "")

		// Poll the survivors until one routes a /select; the prober holds
		// what it gets like any client.
		var took time.Duration
		for {
			urls, _ := cl.snapshot()
			for _, u := range urls {
				sel, err := client.New(u, haClient).Select(ctx, api.SelectRequest{Router: "simple", TimeoutMS: new(0)})
				if err == nil {
					took = time.Since(killed)
					cl.setLeader(u)
					use(-1-k, sel, u, time.Now(), 10*time.Millisecond)
					break
				}
			}
			if took > 0 || time.Since(killed) > failoverMax {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if took == 0 {
			t.Errorf("kill %d: no surviving replica routed a /select within %v of the leader's SIGKILL", k+1, failoverMax)
			break
		}
		failovers = append(failovers, took)
		takeovers = append(takeovers, killed.Add(took))
		t.Logf("kill %d: leader %s killed; %s routed %v later", k+1, leader, cl.leaderURL(), took.Round(time.Millisecond))

		// The dead leader's lease is void on the new one.
		if oldLease != "" {
			var rel api.ReleaseResponse
			_, err := cl.routeOnLeader(func(rc *client.Client) (err error) {
				rel, err = rc.Release(ctx, oldLease)
				return err
			})
			if err != nil || rel.Released {
				t.Errorf("kill %d: releasing the killed leader's lease %s on the new leader = %+v, %v; want released false", k+1, oldLease, rel, err)
			}
		} else {
			t.Errorf("kill %d: the killed leader had handed out no lease to check", k+1)
		}

		// Load resumes on the new leader; then a replacement joins.
		n := selects.Load()
		poll.Until(t, "ten more routed selects", func() bool { return selects.Load() >= n+10 })
		startReplica(t, args, procs, cl)
	}
	close(stop)
	wg.Wait()

	// (c) every fail-over within the bound, and the figures.
	if len(failovers) == kills {
		sorted := slices.Clone(failovers)
		slices.Sort(sorted)
		p50 := sorted[(len(sorted)-1)/2]
		t.Logf("failover over %d kills: p50 %.2fs max %.2fs (leader-ttl %s, poll-interval %s)",
			kills, p50.Seconds(), sorted[len(sorted)-1].Seconds(), leaderTTL, pollInterval)
	}

	// (b) no policy held by two clients at once.
	byPolicy := map[int][]hold{}
	for _, h := range holds {
		byPolicy[h.index] = append(byPolicy[h.index], h)
	}
	for idx, hs := range byPolicy {
		sort.Slice(hs, func(i, j int) bool { return hs[i].from.Before(hs[j].from) })
		for i := range hs {
			for j := i + 1; j < len(hs); j++ {
				a, b := hs[i], hs[j]
				if a.from.Before(b.to) && b.from.Before(a.to) {
					t.Errorf("policy %d held by client %d (from %s) and client %d (from %s) at once: %s-%s and %s-%s",
						idx, a.client, a.replica, b.client, b.replica,
						a.from.Format("15:04:05.000"), a.to.Format("15:04:05.000"), b.from.Format("15:04:05.000"), b.to.Format("15:04:05.000"))
				}
			}
		}
	}
	spanning := 0 // holds from a dead leader still going when its successor routed
	for _, h := range holds {
		for _, at := range takeovers {
			if h.from.Before(at) && h.to.After(at) {
				spanning++
			}
		}
	}
	for i, p := range policies {
		if m := p.maxHeld.Load(); m > 1 {
			t.Errorf("policy %d saw %d clients holding it at once", i, m)
		}
	}

	// (a) every acknowledged registration on every replica.
	var want []string
	acked.Range(func(k, _ any) bool { want = append(want, k.(string)); return true })
	urls, _ := cl.snapshot()
	for _, u := range urls {
		var missing []string
		poll.Until(t, "every policy registered on "+u, func() bool {
			missing = missingPolicies(u, want)
			return len(missing) == 0
		})
		if len(missing) > 0 {
			t.Errorf("%s lacks acknowledged registrations %v", u, missing)
		}
	}
	t.Logf("%d holds by %d clients (%d of them still going when a new leader first routed), %d registrations acknowledged during the kills, %d replicas checked",
		len(holds), loadClients, spanning, registered.Load(), len(urls))
}

func (c *haCluster) leaderURL() string {
	_, l := c.snapshot()
	return l
}

// missingPolicies returns the ids in want that GET /policies on the
// replica at u does not list (all of them if it does not answer).
func missingPolicies(u string, want []string) []string {
	list, err := client.New(u, haClient).Policies(context.Background())
	if err != nil {
		return want
	}
	have := map[string]bool{}
	for _, p := range list.Policies {
		have[p.ID] = true
	}
	var missing []string
	for _, id := range want {
		if !have[id] {
			missing = append(missing, id)
		}
	}
	return missing
}

// waitLeader waits until exactly one live replica is ready to route (or,
// before any registration, answers /readyz no_policies: ready as it can
// be) and every other one names it as the leader, and returns its URL.
func waitLeader(tb testing.TB, c *haCluster) string {
	tb.Helper()
	var leader string
	poll.Until(tb, "one leader", func() bool {
		urls, _ := c.snapshot()
		leader = ""
		var named []string
		for _, u := range urls {
			err := client.New(u, haClient).Ready(context.Background())
			var ce *client.Error
			if err != nil && !errors.As(err, &ce) {
				return false
			}
			if err == nil || ce.Code == api.CodeNoPolicies {
				if leader != "" {
					return false
				}
				leader = u
			} else {
				named = append(named, ce.Leader)
			}
		}
		for _, n := range named {
			if n != leader {
				return false
			}
		}
		return leader != ""
	})
	c.setLeader(leader)
	return leader
}
