package app

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/client"
	"github.com/policyrouter/policyrouter/internal/etcdtest"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/routing"
)

// A follower does not poll, so what SMG's worker API says of an engine
// (a registration's first probe, each worker's state) is the leader's to
// say: a registration through a follower is done by the leader, and the
// follower's lists and stats are the leader's.
func TestFollowerWorkersAreTheLeaders(t *testing.T) {
	etcd := etcdtest.Start(t)
	fleet := newProxyFleet(t, 2)
	leader := startReplica(t, etcd.Endpoint, "/ha-workers/")
	poll.Until(t, "the first replica to lead", func() bool { leading, _ := leader.app.Leader(); return leading })
	// The follower's own wait for a first probe would last its poll
	// period, a minute: a registration through it must not wait for it.
	follower := startReplica(t, etcd.Endpoint, "/ha-workers/", func(c *Config) { c.PollInterval = time.Minute })
	if l, _ := leaderOf(t, leader, follower); l != leader {
		t.Fatal("the second replica leads; want the first")
	}
	hc := &http.Client{Timeout: 20 * time.Second}

	for _, u := range fleet.URLs() {
		b, _ := json.Marshal(map[string]any{"url": u})
		res, err := hc.Post(follower.url+"/workers", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatalf("POST /workers through the follower: %v", err)
		}
		var acc struct {
			WorkerID string `json:"worker_id"`
		}
		_ = json.NewDecoder(res.Body).Decode(&acc)
		res.Body.Close()
		if res.StatusCode != http.StatusAccepted || acc.WorkerID == "" {
			t.Fatalf("POST /workers through the follower = %d %+v; want 202 naming the worker", res.StatusCode, acc)
		}
		// The leader registered it and waited for its first probe: ready,
		// as the leader says, on the follower at once.
		for _, r := range []*replica{follower, leader} {
			code, w := getJSON(t, r.url, "/workers/"+url.PathEscape(acc.WorkerID))
			if code != http.StatusOK || w["status"] != "ready" {
				t.Errorf("GET /workers/%s on %s, just registered through the follower = %d %v; want ready", acc.WorkerID, r.url, code, w)
			}
		}
	}

	// The follower's list is the leader's.
	_, onLeader := getJSON(t, leader.url, "/workers")
	_, onFollower := getJSON(t, follower.url, "/workers")
	if !reflect.DeepEqual(onFollower, onLeader) {
		t.Errorf("GET /workers on the follower:\n%v\nwant the leader's:\n%v", onFollower, onLeader)
	}
	if ws, _ := onFollower["workers"].([]any); len(ws) != fleet.Len() {
		t.Errorf("GET /workers on the follower lists %d workers; want %d", len(ws), fleet.Len())
	}

	// The stats the status command prints, asked of the follower, are the
	// leader's: its policies idle, and said to be the leader's view.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := client.New(follower.url, hc).Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Replica == nil || st.Replica.StatsFrom != leader.url {
		t.Errorf("follower /stats replica %+v; want the stats from %s", st.Replica, leader.url)
	}
	if len(st.Policies) != fleet.Len() {
		t.Fatalf("follower /stats: %d policies; want %d", len(st.Policies), fleet.Len())
	}
	for _, p := range st.Policies {
		if p.State != routing.StateIdle {
			t.Errorf("follower /stats: policy %d %s; want idle, as the leader sees it", p.Index, p.State)
		}
	}
}
