package app

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/policyrouter/policyrouter/auth"
	"github.com/policyrouter/policyrouter/internal/etcdtest"
	"github.com/policyrouter/policyrouter/internal/poll"
)

// A follower's stream outlives the leader that leased its policy: the
// next leader counts its lease (adopted under the same id) until the
// stream ends, and the stream ends complete.
func TestFollowerStreamSurvivesLeaderChange(t *testing.T) {
	etcd := etcdtest.Start(t)
	fleet := newProxyFleet(t, 1)
	rs := []*replica{
		startReplica(t, etcd.Endpoint, "/ha-proxy-change/"),
		startReplica(t, etcd.Endpoint, "/ha-proxy-change/"),
		startReplica(t, etcd.Endpoint, "/ha-proxy-change/"),
	}
	leader, followers := leaderOf(t, rs...)
	registerFleet(t, followers[0], leader, fleet, 1)

	// A long stream on a follower: its first event, then the policy
	// freezes, and the stream is held mid-answer.
	res := generate(t, followers[0].url, 1000, nil)
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("follower /generate = %d", res.StatusCode)
	}
	body := bufio.NewReader(res.Body)
	if line, err := body.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line of the stream %q, %v", line, err)
	}
	fleet.Policy(0).Freeze()
	poll.Until(t, "the stream's lease on the leader", func() bool { return leader.app.State.Stats().Leases == 1 })

	leader.srv.CloseClientConnections()
	leader.stop()
	next, _ := leaderOf(t, followers...)
	poll.Until(t, "the new leader to count the stream's lease", func() bool { return next.app.State.Stats().Leases == 1 })

	fleet.Policy(0).Thaw()
	if complete, err := streamOutcome(body); !complete || err != nil {
		t.Fatalf("the follower's stream across the leader change: complete %t, err %v", complete, err)
	}
	poll.Until(t, "the adopted lease back on the new leader", func() bool { return next.app.State.Stats().Leases == 0 })
}

// Three replicas on etcd, with auth, each proxying streams to three
// policies of capacity 2: no policy ever runs more than 2 requests, and
// when the leader is killed, no stream through a follower is dropped.
func TestThreeReplicasProxyWithinCapacityAcrossFailOver(t *testing.T) {
	const (
		secret   = "0123456789abcdef0123456789abcdef-replicas"
		capacity = 2
		clients  = 12
	)
	etcd := etcdtest.Start(t)
	fleet := newProxyFleet(t, 3)
	withSecret := func(c *Config) { c.JWTSecret = secret }
	rs := []*replica{
		startReplica(t, etcd.Endpoint, "/ha-proxy-load/", withSecret),
		startReplica(t, etcd.Endpoint, "/ha-proxy-load/", withSecret),
		startReplica(t, etcd.Endpoint, "/ha-proxy-load/", withSecret),
	}
	token, err := auth.Mint(auth.Config{Secret: []byte(secret)}, "test", []string{auth.ScopeAdmin, auth.ScopeRoute, auth.ScopeRead}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leader, followers := leaderOf(t, rs...)
	registerFleet(t, followers[0], leader, fleet, capacity, token)

	var (
		killed   atomic.Pointer[replica]
		stop     atomic.Bool
		inFlight [3]atomic.Int32 // streams answered 200 and not ended, by replica
		served   [3]atomic.Int32 // streams ended complete, by replica
		afterOK  atomic.Int32    // streams ended complete through the survivors after the kill
		mu       sync.Mutex
		failures []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for i := c; !stop.Load(); i++ {
				which := i % len(rs)
				r := rs[which]
				if killed.Load() == r {
					continue
				}
				wasKilled := killed.Load() != nil
				res, err := sendGenerate(r.url, 40+rng.IntN(160), map[string]string{"Authorization": "Bearer " + token, "X-Select-Timeout-MS": "10000"})
				if err != nil {
					continue // the killed leader's connection, refused or cut
				}
				if res.StatusCode != http.StatusOK {
					b, _ := io.ReadAll(res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusServiceUnavailable {
						fail("replica %d answered %d: %s", which, res.StatusCode, b)
					}
					continue // not_leader or no idle policy during the election
				}
				inFlight[which].Add(1)
				complete, err := streamOutcome(res.Body)
				res.Body.Close()
				inFlight[which].Add(-1)
				switch {
				case complete && err == nil:
					served[which].Add(1)
					if wasKilled {
						afterOK.Add(1)
					}
				case killed.Load() != r:
					fail("a stream through replica %d (not killed) ended incomplete: %v", which, err)
				}
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()

	poll.Until(t, "every replica to have proxied streams", func() bool {
		return served[0].Load() >= 5 && served[1].Load() >= 5 && served[2].Load() >= 5
	})
	// Kill the leader while streams run through both followers.
	var leaderAt int
	for i, r := range rs {
		if r == leader {
			leaderAt = i
		}
	}
	poll.Until(t, "streams in flight through both followers", func() bool {
		for i := range rs {
			if i != leaderAt && inFlight[i].Load() == 0 {
				return false
			}
		}
		return true
	})
	// Before the kill, with every replica proxying: never above capacity.
	for i := range fleet.Len() {
		if peak := fleet.Policy(i).PeakLoad(); peak > capacity {
			t.Errorf("before the kill: policy %d ran %d requests at once; capacity %d", i, peak, capacity)
		}
		fleet.Policy(i).ResetPeak()
	}
	// The kill cuts the leader's own streams. The fakes, as an engine
	// that has not noticed yet, run them on: their leases end unfinished,
	// and their slots stay taken until a probe shows the work gone.
	killed.Store(leader)
	leader.srv.CloseClientConnections()
	leader.stop()
	leaderOf(t, followers...)
	poll.Until(t, "streams through the survivors after the kill", func() bool { return afterOK.Load() >= 30 })
	stop.Store(true)
	wg.Wait()

	for _, f := range failures {
		t.Error(f)
	}
	// From the kill on, across the old leader's last hand-outs, the new
	// leader's adoptions and its own: never above capacity either.
	for i := range fleet.Len() {
		if peak := fleet.Policy(i).PeakLoad(); peak > capacity {
			t.Errorf("from the kill on: policy %d ran %d requests at once; capacity %d", i, peak, capacity)
		}
	}
	t.Logf("streams served by replica: %d, %d, %d (leader %d killed); %d after the kill",
		served[0].Load(), served[1].Load(), served[2].Load(), leaderAt, afterOK.Load())
}

// A leader that loses its term but lives on (its etcd session expired)
// hands the leases of its own streams in flight to the next leader.
func TestLeadersStreamGoesToTheNextLeader(t *testing.T) {
	etcd := etcdtest.Start(t)
	fleet := newProxyFleet(t, 1)
	a := startReplica(t, etcd.Endpoint, "/ha-proxy-term/")
	b := startReplica(t, etcd.Endpoint, "/ha-proxy-term/")
	leader, followers := leaderOf(t, a, b)
	registerFleet(t, leader, leader, fleet, 1)

	res := generate(t, leader.url, 1000, nil)
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("leader /generate = %d", res.StatusCode)
	}
	body := bufio.NewReader(res.Body)
	if line, err := body.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line of the stream %q, %v", line, err)
	}
	fleet.Policy(0).Freeze()
	if got := leader.app.State.Stats().Leases; got != 1 {
		t.Fatalf("leases on the leader during its stream: %d; want 1", got)
	}

	// End the leader's term: its election session goes.
	cli := leader.app.etcd.Client()
	keys, err := cli.Get(t.Context(), leader.app.electionPrefix()+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(keys.Kvs) == 0 {
		t.Fatalf("the leader's campaign key: %v", err)
	}
	if _, err := cli.Revoke(t.Context(), clientv3.LeaseID(keys.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	next, _ := leaderOf(t, followers[0])
	poll.Until(t, "the next leader to count the old leader's stream", func() bool { return next.app.State.Stats().Leases == 1 })

	fleet.Policy(0).Thaw()
	if complete, err := streamOutcome(body); !complete || err != nil {
		t.Fatalf("the old leader's stream: complete %t, err %v", complete, err)
	}
	poll.Until(t, "the lease back on the next leader", func() bool { return next.app.State.Stats().Leases == 0 })
}
