package app

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/internal/etcdtest"
	"github.com/policyrouter/policyrouter/internal/poll"
)

// readyz returns the status and error code of the replica's /readyz.
func readyz(t *testing.T, r *replica) (int, string) {
	t.Helper()
	resp, err := http.Get(r.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var env api.ErrorResponse
	_ = json.NewDecoder(resp.Body).Decode(&env)
	return resp.StatusCode, env.Error.Code
}

// A leader on etcd is ready only with a policy to route to, and not once
// etcd stops answering; the update manager's Ready keeps its meaning
// (first probes answered) throughout.
func TestReadyzOnEtcd(t *testing.T) {
	etcd := etcdtest.Start(t)
	policy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"idle": true}`)
	}))
	defer policy.Close()
	r := startReplica(t, etcd.Endpoint, "/readyz-test/")
	poll.Until(t, "leadership", func() bool { leading, _ := r.app.Leader(); return leading })
	if code, ecode := readyz(t, r); code != http.StatusServiceUnavailable || ecode != api.CodeNoPolicies {
		t.Errorf("leader with no policies: /readyz %d %q, want 503 no_policies", code, ecode)
	}
	if err := r.app.Ready(); err != nil {
		t.Errorf("Ready() with no policies = %v, want nil (nothing to probe)", err)
	}
	if code, _, body := post(t, r.url, "/policies", map[string]any{"url": policy.URL, "index": 0}); code != http.StatusCreated {
		t.Fatalf("register: %d %v", code, body)
	}
	poll.Until(t, "/readyz 200", func() bool { code, _ := readyz(t, r); return code == http.StatusOK })

	etcd.Stop()
	code, ecode := readyz(t, r)
	if code != http.StatusServiceUnavailable || (ecode != api.CodeStoreDown && ecode != api.CodeNotLeader) {
		t.Errorf("etcd stopped: /readyz %d %q, want 503 store_unavailable (or not_leader once the term is lost)", code, ecode)
	}
	t.Logf("etcd stopped: /readyz %d %s", code, ecode)
}
