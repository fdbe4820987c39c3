package app

import (
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/etcdtest"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/routing"
)

// The generations a whole-fleet sleep aborts wait for the wake through a
// follower too: its proxy asks the leader, which put the fleet to sleep,
// whether the policies come back, and its continuations wait for them.
func TestFleetSleepWakeResumesGenerationsThroughFollower(t *testing.T) {
	const n, tokens = 8, 100
	etcd := etcdtest.Start(t)
	fleet, err := fakepolicy.New(2, rand.NewPCG(1, 2), fakepolicy.Options{Engine: fakepolicy.EngineSGLang, TokensPerSecond: 25})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fleet.Close() })
	for i := range 2 {
		fleet.Policy(i).SetWeightVersion("1")
	}
	slow := func(c *Config) {
		c.ProxyResume, c.ProxyRetries = true, DefaultConfig().ProxyRetries
		c.PollTimeout = 5 * time.Second // a loaded machine must not make them unhealthy
	}
	leader, followers := leaderOf(t, startReplica(t, etcd.Endpoint, "/sleep-follower/", slow), startReplica(t, etcd.Endpoint, "/sleep-follower/", slow))
	registerSGLangPair(t, leader.app, leader.url, fleet, n)
	poll.Until(t, "the follower to know both policies", func() bool {
		s := policyStates(t, followers[0].url)
		return len(s) == 2 && allIn(s, routing.StateIdle)
	})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * n}}
	t.Cleanup(client.CloseIdleConnections)
	fr := &fleetRouter{fleet: fleet, base: followers[0].url, client: client}

	g := fr.start(t, n, tokens)
	if code, body := call(t, leader.url, "POST", "/fleet/sleep", `{"drain": false, "resume_within_ms": 600000}`); code != http.StatusOK {
		t.Fatalf("POST /fleet/sleep: %d %s", code, body)
	}
	if !fleet.Policy(0).Asleep() || !fleet.Policy(1).Asleep() || fr.load() != 0 {
		t.Fatalf("engines asleep %v and %v, load %d; want both asleep, nothing running", fleet.Policy(0).Asleep(), fleet.Policy(1).Asleep(), fr.load())
	}
	if d := g.done.Load(); d != 0 {
		t.Fatalf("%d generations answered through the follower while the fleet sleeps; want them waiting for the wake", d)
	}
	if code, body := call(t, leader.url, "POST", "/fleet/wake", `{}`); code != http.StatusOK {
		t.Fatalf("POST /fleet/wake: %d %s", code, body)
	}
	g.wg.Wait()
	g.wantWhole(t, tokens, "1")
}
