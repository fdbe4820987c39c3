package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/internal/etcdtest"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/internal/syncbuf"
	"github.com/policyrouter/policyrouter/internal/testpki"
	"github.com/policyrouter/policyrouter/registry"
)

// replica is one router of several on an etcd store, served over HTTP.
type replica struct {
	app    *App
	url    string
	srv    *httptest.Server
	cancel context.CancelFunc
	done   chan struct{}
	logs   *syncbuf.Buffer
}

// startReplica starts a replica on etcd at endpoint, with a leader ttl of
// 1s unless a configure function sets it.
func startReplica(t *testing.T, endpoint, prefix string, configure ...func(*Config)) *replica {
	t.Helper()
	var handler atomic.Pointer[http.Handler]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*handler.Load()).ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncbuf.Buffer{}
	cfg := Config{
		Store: StoreEtcd, EtcdEndpoints: []string{endpoint}, EtcdPrefix: prefix, LeaderTTL: time.Second,
		AdvertiseURL: srv.URL, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	}
	for _, f := range configure {
		f(&cfg)
	}
	a, err := New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	h := a.Handler()
	handler.Store(&h)
	r := &replica{app: a, url: srv.URL, srv: srv, cancel: cancel, done: make(chan struct{}), logs: logs}
	go func() {
		defer close(r.done)
		_ = a.Run(ctx)
	}()
	t.Cleanup(r.stop)
	return r
}

// stop ends the replica's term and closes its store; later calls wait.
func (r *replica) stop() {
	r.cancel()
	<-r.done
	_ = r.app.Close()
}

func post(t *testing.T, url, path string, body any) (int, http.Header, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, resp.Header, out
}

// leaderOf returns the replica that leads, once exactly one does and
// every other knows it.
func leaderOf(t *testing.T, rs ...*replica) (leader *replica, followers []*replica) {
	t.Helper()
	poll.Until(t, "one leader", func() bool {
		leader, followers = nil, nil
		for _, r := range rs {
			if leading, _ := r.app.Leader(); leading {
				if leader != nil {
					return false
				}
				leader = r
			} else {
				followers = append(followers, r)
			}
		}
		if leader == nil {
			return false
		}
		// Each follower learns the leader from the election on its own
		// time: until it has, it answers not_leader to what it forwards.
		for _, f := range followers {
			if _, l := f.app.Leader(); l != leader.url {
				return false
			}
		}
		return true
	})
	return leader, followers
}

// Two replicas on one etcd: one leads; the follower takes registrations and
// sends routing to the leader; when the leader stops, the follower takes
// over without handing out the policy the old leader's client still uses,
// and the old lease is released false.
func TestReplicasElectOneLeaderAndFailOver(t *testing.T) {
	etcd := etcdtest.Start(t)
	var busy [3]atomic.Bool
	var policies [3]*httptest.Server
	for i := range policies {
		policies[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `{"idle": %t}`, !busy[i].Load())
		}))
		defer policies[i].Close()
	}
	a := startReplica(t, etcd.Endpoint, "/ha-test/")
	b := startReplica(t, etcd.Endpoint, "/ha-test/")
	leader, followers := leaderOf(t, a, b)
	follower := followers[0]
	// The follower says, at INFO, whom it follows.
	poll.Until(t, "the follower to log its leader", func() bool {
		return strings.Contains(follower.logs.String(), `"level":"INFO","msg":"leader election: following","leader":"`+leader.url+`"`)
	})

	// Admin writes on the follower reach the leader through etcd.
	for i, p := range policies {
		if code, _, body := post(t, follower.url, "/policies", map[string]any{"url": p.URL, "index": i}); code != http.StatusCreated {
			t.Fatalf("register on the follower: %d %v", code, body)
		}
	}
	poll.Until(t, "the leader to hear of the follower's registrations", func() bool { return len(leader.app.State.Snapshot().Policies()) == 3 })

	// The follower, which does not poll, answers /stats with the leader's
	// view of the policies, and says so.
	poll.Until(t, "the leader to hear from its policies", func() bool { return leader.app.State.Stats().Idle == 3 })
	statesOf := func(body map[string]any) []any {
		var out []any
		ps, _ := body["policies"].([]any)
		for _, p := range ps {
			out = append(out, p.(map[string]any)["state"])
		}
		return out
	}
	_, lead := getJSON(t, leader.url, "/stats")
	code, fol := getJSON(t, follower.url, "/stats")
	replica, _ := fol["replica"].(map[string]any)
	if code != http.StatusOK || fmt.Sprint(statesOf(fol)) != fmt.Sprint(statesOf(lead)) || len(statesOf(fol)) != 3 ||
		replica["stats_from"] != leader.url || replica["leading"] != false {
		t.Fatalf("follower /stats: %d, states %v, replica %v; want the leader's states %v from %s", code, statesOf(fol), replica, statesOf(lead), leader.url)
	}

	// The follower sends routing to the leader.
	code, hdr, body := post(t, follower.url, "/select", map[string]any{"timeout_ms": 0})
	if e, _ := body["error"].(map[string]any); code != http.StatusServiceUnavailable || e["code"] != api.CodeNotLeader || e["leader"] != leader.url || hdr.Get(api.LeaderHeader) != leader.url {
		t.Fatalf("follower /select = %d %v (header %q); want 503 not_leader naming %s", code, body, hdr.Get(api.LeaderHeader), leader.url)
	}
	if err := follower.app.Ready(); err == nil {
		t.Error("a follower says it is ready")
	}

	// The leader hands out policy 0, whose client then keeps it busy.
	poll.Until(t, "the leader's first probe round", func() bool { return leader.app.Ready() == nil })
	code, _, sel := post(t, leader.url, "/select", map[string]any{"timeout_ms": 2000, "router": "simple"})
	if code != http.StatusOK {
		t.Fatalf("leader /select = %d %v", code, sel)
	}
	held := int(sel["index"].(float64))
	busy[held].Store(true)
	// The other two are handed out too, and a fourth /select waits: when
	// the leader stops leading, the wait ends with not_leader.
	for range 2 {
		if code, _, s := post(t, leader.url, "/select", map[string]any{"timeout_ms": 2000, "router": "simple"}); code != http.StatusOK {
			t.Fatalf("leader /select = %d %v", code, s)
		}
	}
	waiting := make(chan map[string]any, 1)
	go func() {
		_, _, body := post(t, leader.url, "/select", map[string]any{"timeout_ms": 30000, "router": "simple"})
		waiting <- body
	}()
	poll.Until(t, "a waiting /select", func() bool { return leader.app.State.Stats().Waiters == 1 })

	leader.stop()
	if e, _ := (<-waiting)["error"].(map[string]any); e["code"] != api.CodeNotLeader {
		t.Errorf("a /select waiting when the leader stopped leading got %v; want not_leader", e)
	}
	newLeader, _ := leaderOf(t, follower)
	if newLeader != follower {
		t.Fatal("the follower did not take over")
	}
	poll.Until(t, "the new leader's first probe round", func() bool { return follower.app.Ready() == nil })
	got := map[int]bool{}
	for range 2 {
		code, _, s := post(t, follower.url, "/select", map[string]any{"timeout_ms": 2000, "router": "simple"})
		if code != http.StatusOK {
			t.Fatalf("new leader /select = %d %v", code, s)
		}
		got[int(s["index"].(float64))] = true
	}
	if got[held] || len(got) != 2 {
		t.Errorf("new leader handed out %v; want the two policies other than %d, which the old leader's client still uses", got, held)
	}
	if code, _, s := post(t, follower.url, "/select", map[string]any{"timeout_ms": 200}); code != http.StatusServiceUnavailable {
		t.Errorf("third /select on the new leader = %d %v; want 503: the only policy left is busy", code, s)
	}
	code, _, rel := post(t, follower.url, "/release", map[string]any{"lease_id": sel["lease_id"]})
	if code != http.StatusOK || rel["released"] != false {
		t.Errorf("releasing the old leader's lease = %d %v; want 200 released false", code, rel)
	}
}

func getJSON(t *testing.T, url, path string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(url + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// A rolling update the leader started continues on the replica that takes
// over, from the state stored in etcd, and ends with every policy at the
// new version.
func TestRollingUpdateContinuesAfterFailOver(t *testing.T) {
	etcd := etcdtest.Start(t)
	gate := make(chan struct{})
	var actions, blocked atomic.Int32
	var versions [4]atomic.Int64
	var policies [4]*httptest.Server
	for i := range policies {
		policies[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/update" {
				// The first action completes; the others wait for the gate
				// (or for their sender to give up).
				if actions.Add(1) > 1 {
					blocked.Add(1)
					select {
					case <-gate:
					case <-r.Context().Done():
						return
					}
				}
				versions[i].Store(8)
				return
			}
			fmt.Fprintf(w, `{"idle": true, "version": %d}`, versions[i].Load())
		}))
		defer policies[i].Close()
	}
	a := startReplica(t, etcd.Endpoint, "/ha-update/")
	b := startReplica(t, etcd.Endpoint, "/ha-update/")
	leader, followers := leaderOf(t, a, b)
	for i, p := range policies {
		if code, _, body := post(t, followers[0].url, "/policies", map[string]any{"url": p.URL, "index": i}); code != http.StatusCreated {
			t.Fatalf("register: %d %v", code, body)
		}
	}
	poll.Until(t, "the leader to route all four", func() bool {
		return len(leader.app.State.Snapshot().Policies()) == 4 && leader.app.Ready() == nil
	})
	code, _, u := post(t, leader.url, "/updates", map[string]any{"version": 8, "max_unavailable": 1, "action": map[string]any{"path": "/update"}})
	if code != http.StatusAccepted {
		t.Fatalf("POST /updates = %d %v", code, u)
	}
	id, _ := u["id"].(string)
	poll.Until(t, "the second wave's action to be in flight", func() bool { return blocked.Load() >= 1 })

	leader.stop()
	next, _ := leaderOf(t, followers[0])
	close(gate)
	var last map[string]any
	poll.Until(t, "the update to end on the new leader", func() bool {
		code, body := getJSON(t, next.url, "/updates/"+id)
		last = body
		return code == http.StatusOK && body["state"] != "running"
	})
	if last["state"] != "succeeded" {
		t.Fatalf("update %s ended %v on the new leader: %v", id, last["state"], last)
	}
	for i := range versions {
		if v := versions[i].Load(); v != 8 {
			t.Errorf("policy %d at version %d, want 8", i, v)
		}
	}
}

// Routers reach an etcd that requires client certificates with --etcd-ca,
// --etcd-cert and --etcd-key, and are refused without a certificate.
func TestEtcdOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "etcd-ca")
	certFile, keyFile := ca.Server(t, "etcd").Write(t, dir, "etcd")
	caFile := ca.WriteCert(t, dir, "ca")
	clientCert, clientKey := ca.Client(t, "router").Write(t, dir, "router")
	etcd := etcdtest.StartTLS(t, &etcdtest.TLS{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile})

	cfg := Config{Store: StoreEtcd, EtcdEndpoints: []string{etcd.Endpoint}, AdvertiseURL: "http://127.0.0.1:1",
		EtcdCA: caFile, EtcdCert: clientCert, EtcdKey: clientKey, Logger: slog.New(slog.DiscardHandler)}
	a, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New over mutual TLS: %v", err)
	}
	if _, _, err := a.Registry.Register(context.Background(), registry.Spec{URL: "http://10.0.0.1:8000"}); err != nil {
		t.Errorf("Register over mutual TLS: %v", err)
	}
	_ = a.Close()

	cfg.EtcdCert, cfg.EtcdKey = "", ""
	if a, err := New(context.Background(), cfg); err == nil {
		_ = a.Close()
		t.Error("New without a client certificate succeeded against an etcd that requires one")
	}
}

// With etcd gone, an admin write on a replica answers 503
// store_unavailable after the request timeout, not a hang or a 500, and
// writes nothing.
func TestEtcdDownIsStoreUnavailable(t *testing.T) {
	etcd := etcdtest.Start(t)
	r := startReplica(t, etcd.Endpoint, "/ha-down/")
	etcd.Stop()
	start := time.Now()
	code, hdr, body := post(t, r.url, "/policies", map[string]any{"url": "http://10.0.0.1:8000"})
	e, _ := body["error"].(map[string]any)
	if code != http.StatusServiceUnavailable || e["code"] != api.CodeStoreDown || hdr.Get("Retry-After") == "" {
		t.Fatalf("POST /policies with etcd down = %d %v; want 503 store_unavailable with Retry-After", code, body)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("the write took %s to fail; the request timeout is 5s", d)
	}
	if n := len(r.app.State.Snapshot().Policies()); n != 0 {
		t.Errorf("%d policies published although nothing was stored", n)
	}
}

// etcd stops for 5 s under load and comes back: a replica routes again
// within 2× the leader ttl of etcd's return, no request meets a 500, and a
// registration change made after the restart reaches every replica.
func TestEtcdRestartUnderLoad(t *testing.T) {
	etcd := etcdtest.Start(t)
	var policies [3]*httptest.Server
	for i := range policies {
		policies[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `{"idle": true}`)
		}))
		defer policies[i].Close()
	}
	// The default leader ttl: etcd raises shorter lease ttls to its
	// minimum (1.5× its election timeout, 2s by default) anyway.
	var rs []*replica
	for range 3 {
		rs = append(rs, startReplica(t, etcd.Endpoint, "/ha-restart/", func(c *Config) { c.LeaderTTL = DefaultLeaderTTL }))
	}
	leader, _ := leaderOf(t, rs...)
	for i, p := range policies[:2] {
		if code, _, body := post(t, rs[0].url, "/policies", map[string]any{"url": p.URL, "index": i}); code != http.StatusCreated {
			t.Fatalf("register: %d %v", code, body)
		}
	}
	poll.Until(t, "the leader's first probe round", func() bool { return leader.app.Ready() == nil })

	// Load: every replica is asked to route, in turn, without pause; the
	// time of each routed answer is kept, and any 5xx but 503 is a fault.
	var (
		mu     sync.Mutex
		routed []time.Time
		faults []string
	)
	stop := make(chan struct{})
	loadDone := make(chan struct{})
	hc := &http.Client{Timeout: 10 * time.Second}
	go func() {
		defer close(loadDone)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r := rs[i%len(rs)]
			resp, err := hc.Post(r.url+"/select", "application/json", strings.NewReader(`{"timeout_ms": 100}`))
			if err != nil {
				continue
			}
			var body map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			mu.Lock()
			switch {
			case resp.StatusCode == http.StatusOK:
				routed = append(routed, time.Now())
				if lease, _ := body["lease_id"].(string); lease != "" {
					rel, err := hc.Post(r.url+"/release", "application/json", strings.NewReader(`{"lease_id": "`+lease+`"}`))
					if err == nil {
						rel.Body.Close()
					}
				}
			case resp.StatusCode >= 500 && resp.StatusCode != http.StatusServiceUnavailable:
				faults = append(faults, fmt.Sprintf("%s: %d %v", r.url, resp.StatusCode, body))
			}
			mu.Unlock()
		}
	}()
	defer func() { close(stop); <-loadDone }()
	routedAfter := func(t0 time.Time) (time.Duration, bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, at := range routed {
			if at.After(t0) {
				return at.Sub(t0), true
			}
		}
		return 0, false
	}
	poll.Until(t, "routing under load", func() bool { _, ok := routedAfter(time.Time{}); return ok })

	back, err := etcd.Restart(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ttl := rs[0].app.Config.LeaderTTL
	poll.Until(t, "routing after etcd's return", func() bool { _, ok := routedAfter(back); return ok })
	if d, _ := routedAfter(back); d > 2*ttl {
		t.Errorf("routing resumed %s after etcd's return; want within 2× the leader ttl (%s)", d.Round(time.Millisecond), ttl)
		for i, r := range rs {
			t.Logf("replica %d:\n%s", i, r.logs.String())
		}
		t.Logf("back at %s", back.Format(time.RFC3339Nano))
	} else {
		t.Logf("routing resumed %s after etcd's return (leader ttl %s)", d.Round(time.Millisecond), ttl)
	}

	// A registration change after the restart reaches every replica.
	for {
		code, _, body := post(t, rs[1].url, "/policies", map[string]any{"url": policies[2].URL, "index": 2})
		if code == http.StatusCreated {
			break
		}
		if e, _ := body["error"].(map[string]any); code != http.StatusServiceUnavailable || e["code"] != api.CodeStoreDown {
			t.Fatalf("register after the restart: %d %v", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i, r := range rs {
		poll.Until(t, fmt.Sprintf("replica %d to hear of the new policy", i), func() bool { return len(r.app.State.Snapshot().Policies()) == 3 })
	}
	mu.Lock()
	defer mu.Unlock()
	if len(faults) > 0 {
		t.Errorf("%d answers were faults, the first: %s", len(faults), faults[0])
	}
}

// Replicas that serve HTTPS with a private CA and require client
// certificates: a follower reads the leader's /stats, and proxies under
// its leases, when --peer-ca trusts the CA and --peer-cert is a
// certificate the leader accepts; without them it falls back to its own
// view (no stats_from) and cannot proxy.
func TestFollowerStatsOverMutualTLS(t *testing.T) {
	etcd := etcdtest.Start(t)
	dir := t.TempDir()
	ca := testpki.NewCA(t, "replicas CA")
	caFile := ca.WriteCert(t, dir, "ca.crt")
	serverCert, serverKey := ca.Server(t, "replica").Write(t, dir, "server")
	peerCert, peerKey := ca.Client(t, "peer").Write(t, dir, "peer")
	policy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"idle": true}`) }))
	defer policy.Close()

	start := func(withPeer bool) (*App, string) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{
			Store: StoreEtcd, EtcdEndpoints: []string{etcd.Endpoint}, EtcdPrefix: "/ha-tls/", LeaderTTL: time.Second,
			AdvertiseURL: "https://" + ln.Addr().String(), PollInterval: 20 * time.Millisecond,
			TLSCert: serverCert, TLSKey: serverKey, TLSClientCA: caFile, Logger: slog.New(slog.DiscardHandler),
		}
		if withPeer {
			cfg.PeerCA, cfg.PeerCert, cfg.PeerKey = caFile, peerCert, peerKey
		}
		ctx, cancel := context.WithCancel(context.Background())
		a, err := New(ctx, cfg)
		if err != nil {
			cancel()
			_ = ln.Close()
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- a.Serve(ctx, ln) }()
		t.Cleanup(func() { cancel(); <-done })
		return a, cfg.AdvertiseURL
	}
	a, aURL := start(true)
	b, bURL := start(true)
	client := httpsClient(t, ca.Pool(), ca.Client(t, "operator").TLS())
	var leader *App
	var leaderURL string
	poll.Until(t, "a leader", func() bool {
		for _, r := range []struct {
			a   *App
			url string
		}{{a, aURL}, {b, bURL}} {
			if leading, _ := r.a.Leader(); leading {
				leader, leaderURL = r.a, r.url
				return true
			}
		}
		return false
	})
	c, cURL := start(false) // a follower: the leader is elected

	resp, err := client.Post(leaderURL+"/policies", "application/json", strings.NewReader(`{"url": "`+policy.URL+`", "index": 0}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("register: %d", resp.StatusCode)
	}
	poll.Until(t, "the leader to hear from the policy", func() bool { return leader.State.Stats().Idle == 1 })

	statsOf := func(url string) (from string, states []string) {
		resp, err := client.Get(url + "/stats")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st api.Stats
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		if st.Replica != nil {
			from = st.Replica.StatsFrom
		}
		for _, p := range st.Policies {
			states = append(states, p.State)
		}
		return from, states
	}
	for _, r := range []struct {
		a        *App
		url      string
		withPeer bool
	}{{a, aURL, true}, {b, bURL, true}, {c, cURL, false}} {
		if r.a == leader {
			continue
		}
		poll.Until(t, "the follower to hear of the policy", func() bool { return len(r.a.State.Snapshot().Policies()) == 1 })
		// A replica learns who leads from the election, apart from the
		// registration: on a loaded machine the policy can reach it first.
		poll.Until(t, "the follower to know the leader", func() bool { _, l := r.a.Leader(); return l == leaderURL })
		from, states := statsOf(r.url)
		switch {
		case r.withPeer && (from != leaderURL || fmt.Sprint(states) != "[idle]"):
			t.Errorf("follower %s with --peer-ca and --peer-cert: stats from %q, states %v; want the leader's (%s), [idle]", r.url, from, states, leaderURL)
		case !r.withPeer && from != "":
			t.Errorf("follower %s without --peer-ca: stats from %q; want its own view, the leader's certificate being untrusted", r.url, from)
		}
		// The follower proxies under a lease from the leader over the
		// same TLS: without --peer-ca it cannot reach the leader.
		resp, err := client.Post(r.url+"/generate", "application/json", strings.NewReader(`{"text": "hi"}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case r.withPeer && resp.StatusCode != http.StatusOK:
			t.Errorf("follower %s with --peer-ca and --peer-cert: /generate = %d %s; want 200", r.url, resp.StatusCode, body)
		case !r.withPeer && (resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), api.CodeNotLeader)):
			t.Errorf("follower %s without --peer-ca: /generate = %d %s; want 503 not_leader", r.url, resp.StatusCode, body)
		}
	}
}

// A follower waiting in the election stops at once when etcd is gone: its
// cancelled campaign resigns with a call that needs etcd, and the stop
// does not wait for it.
func TestFollowerStopsWithEtcdDown(t *testing.T) {
	etcd := etcdtest.Start(t)
	a := startReplica(t, etcd.Endpoint, "/ha-stop/")
	b := startReplica(t, etcd.Endpoint, "/ha-stop/")
	_, followers := leaderOf(t, a, b)
	etcd.Stop()
	stopped := make(chan struct{})
	go func() { followers[0].stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(poll.Timeout):
		t.Fatal("the follower did not stop with etcd down")
	}
}
