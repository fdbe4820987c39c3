package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/internal/etcdtest"
	"github.com/policyrouter/policyrouter/internal/poll"
)

// kill ends r as a SIGKILL would: its connections cut, its port closed,
// and its etcd session neither revoked nor kept alive, so that the other
// replicas take it for the leader until the session's ttl runs out.
func (r *replica) kill() {
	r.srv.Listener.Close()
	r.srv.CloseClientConnections()
	_ = r.app.Store.Close()
}

// errorCode returns the code of an error envelope, or "".
func errorCode(body []byte) string {
	var env api.ErrorResponse
	_ = json.Unmarshal(body, &env)
	return env.Error.Code
}

// Fail-over is a wait: the leader is killed while streams go through the
// two followers, each with a select timeout far beyond the fail-over
// time; none is answered not_leader (nor any other refusal), every stream
// is whole, and no policy runs more than its capacity across the change
// (the new leader counts the streams in flight, adopted, once).
func TestFailOverIsAWaitThroughFollowers(t *testing.T) {
	const (
		capacity = 2
		clients  = 8
	)
	etcd := etcdtest.Start(t)
	fleet := newProxyFleet(t, 2)
	rs := []*replica{
		startReplica(t, etcd.Endpoint, "/ha-wait-kill/"),
		startReplica(t, etcd.Endpoint, "/ha-wait-kill/"),
		startReplica(t, etcd.Endpoint, "/ha-wait-kill/"),
	}
	leader, followers := leaderOf(t, rs...)
	registerFleet(t, followers[0], leader, fleet, capacity)

	var (
		killed, elected atomic.Bool
		stop            atomic.Bool
		served          atomic.Int32 // streams ended whole
		duringFailOver  atomic.Int32 // of them, sent after the kill and before the next election
		afterElection   atomic.Int32 // of them, sent after the next election
		notLeader       atomic.Int32
		mu              sync.Mutex
		failures        []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 11))
			for i := c; !stop.Load(); i++ {
				via := followers[i%len(followers)]
				inWindow, late := killed.Load() && !elected.Load(), elected.Load()
				res, err := sendGenerate(via.url, 20+rng.IntN(80), map[string]string{"X-Select-Timeout-MS": "30000"})
				if err != nil {
					fail("a request through follower %s: %v", via.url, err)
					continue
				}
				if res.StatusCode != http.StatusOK {
					b, _ := io.ReadAll(res.Body)
					res.Body.Close()
					if errorCode(b) == api.CodeNotLeader {
						notLeader.Add(1)
					}
					fail("follower %s answered %d: %s", via.url, res.StatusCode, b)
					continue
				}
				complete, err := streamOutcome(res.Body)
				res.Body.Close()
				if !complete || err != nil {
					fail("a stream through follower %s ended incomplete: %v", via.url, err)
					continue
				}
				served.Add(1)
				switch {
				case inWindow:
					duringFailOver.Add(1)
				case late:
					afterElection.Add(1)
				}
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()

	poll.Until(t, "streams through the followers", func() bool { return served.Load() >= 10 })
	killed.Store(true)
	leader.kill()
	next, _ := leaderOf(t, followers...)
	elected.Store(true)
	poll.Until(t, "streams sent during the fail-over to end, and more after it", func() bool {
		return duringFailOver.Load() >= 1 && afterElection.Load() >= 20
	})
	stop.Store(true)
	wg.Wait()

	if n := notLeader.Load(); n != 0 {
		t.Errorf("%d requests answered not_leader across the fail-over; want 0", n)
	}
	for _, f := range failures {
		t.Error(f)
	}
	for i := range fleet.Len() {
		if peak := fleet.Policy(i).PeakLoad(); peak > capacity {
			t.Errorf("policy %d ran %d requests at once; capacity %d", i, peak, capacity)
		}
	}
	t.Logf("%d streams whole (%d sent during the fail-over, %d after it), 0 refused; new leader %s",
		served.Load(), duringFailOver.Load(), afterElection.Load(), next.url)
}

// holdElection makes a leader that never answers: a campaign key under
// prefix, older than any replica's, naming an address nothing listens on,
// until the returned function gives it up.
func holdElection(t *testing.T, endpoint, prefix string) (dead string, release func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead = "http://" + ln.Addr().String()
	ln.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: poll.Timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	lease, err := cli.Grant(t.Context(), 3600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(t.Context(), fmt.Sprintf("%sleader/%x", prefix, lease.ID), dead, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	return dead, func() {
		if _, err := cli.Revoke(t.Context(), lease.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// With a leader that does not answer and no other elected: a request
// whose select timeout runs out first is answered not_leader; beyond
// --max-waiters, waiting requests are answered overloaded at once; and
// those that wait are served, whole, once this replica is elected.
func TestFailOverWaitRunsOutAndIsCapped(t *testing.T) {
	const prefix = "/ha-wait-cap/"
	etcd := etcdtest.Start(t)
	fleet := newProxyFleet(t, 1)
	dead, release := holdElection(t, etcd.Endpoint, prefix)
	r := startReplica(t, etcd.Endpoint, prefix, func(c *Config) { c.MaxWaiters = 2 })
	poll.Until(t, "the replica to follow the dead leader", func() bool { l, who := r.app.Leader(); return !l && who == dead })

	send := func(timeoutMS string) (int, []byte, bool) {
		res, err := sendGenerate(r.url, 20, map[string]string{"X-Select-Timeout-MS": timeoutMS})
		if err != nil {
			t.Errorf("POST /generate: %v", err)
			return 0, nil, false
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(res.Body)
			return res.StatusCode, b, false
		}
		complete, err := streamOutcome(res.Body)
		return res.StatusCode, nil, complete && err == nil
	}
	if code, body, _ := send("100"); code != http.StatusServiceUnavailable || errorCode(body) != api.CodeNotLeader {
		t.Errorf("a request whose wait ran out before an election: %d %s; want 503 not_leader", code, body)
	}

	type outcome struct {
		code  int
		body  []byte
		whole bool
	}
	waiting := make(chan outcome, 2)
	for range 2 {
		go func() {
			code, body, whole := send("60000")
			waiting <- outcome{code, body, whole}
		}()
	}
	poll.Until(t, "two requests waiting for a leader", func() bool { return r.app.Server.LeaderWaiters() == 2 })
	if code, body, _ := send("60000"); code != http.StatusServiceUnavailable || errorCode(body) != api.CodeOverloaded {
		t.Errorf("a third request beyond --max-waiters 2: %d %s; want 503 overloaded", code, body)
	}

	// The policies are registered, and the dead leader's key goes: this
	// replica is elected, probes them and serves the two that waited.
	var ps []map[string]any
	for i, u := range fleet.URLs() {
		ps = append(ps, map[string]any{"url": u, "index": i, "capacity": 1})
	}
	b, _ := json.Marshal(map[string]any{"policies": ps})
	req, _ := http.NewRequest(http.MethodPut, r.url+"/policies", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("PUT /policies = %d", res.StatusCode)
	}
	release()
	for range 2 {
		if o := <-waiting; o.code != http.StatusOK || !o.whole {
			t.Errorf("a request that waited for the election: %d %s, whole %t; want 200, whole", o.code, o.body, o.whole)
		}
	}
	if n := r.app.Server.LeaderWaiters(); n != 0 {
		t.Errorf("%d requests still counted waiting for a leader", n)
	}
}
