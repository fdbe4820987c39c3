package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/internal/benchkit"
)

// floorServer is the least any Go HTTP JSON service can do per request: a
// bare net/http server (ServeMux, no middleware) that decodes the router's
// request bodies with encoding/json and encodes answers of the router's
// shape and size, without validation, routing, logging or metrics. It
// serves the router's paths, so one client drives both.
type floorServer struct {
	URL string

	policies int
	refs     []api.PolicyRef
	all      map[string]api.PolicyRef // every policy, for answers that name them all
	next     atomic.Uint64
	srv      *http.Server
	serving  sync.WaitGroup
}

// floorLease is what the floor answers as a lease id: a UUID, like the
// router's.
const floorLease = "5f0c1e2a-9b7d-8e43-8000-00000000002a"

// startFloor starts a floor whose answers name policies 0..policies-1,
// with ids and URLs as long as the router's (a UUID, and the fleet's
// http://127.0.0.1:port/p/i).
func startFloor(policies, nodes int) (*floorServer, error) {
	f := &floorServer{policies: policies, all: make(map[string]api.PolicyRef, policies)}
	for i := range policies {
		ref := api.PolicyRef{
			ID:     fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
			URL:    "http://127.0.0.1:40000/p/" + strconv.Itoa(i),
			NodeID: benchkit.NodeName(i, nodes),
		}
		f.refs = append(f.refs, ref)
		f.all[strconv.Itoa(i)] = ref
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /select", f.selectPolicy)
	mux.HandleFunc("POST /release", f.release)
	mux.HandleFunc("POST /assign", f.assign)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	benchkit.GoLabelled(&f.serving, benchkit.SideFloor, func() { _ = f.srv.Serve(ln) })
	f.URL = "http://" + ln.Addr().String()
	return f, nil
}

// Close stops the floor.
func (f *floorServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := f.srv.Shutdown(ctx)
	f.serving.Wait()
	return err
}

// pick answers a policy in turn, like a round robin.
func (f *floorServer) pick() int { return int(f.next.Add(1) % uint64(f.policies)) }

func (f *floorServer) selectPolicy(w http.ResponseWriter, r *http.Request) {
	var req api.SelectRequest
	if !decodeFloor(w, r, &req) {
		return
	}
	i := f.pick()
	ref := f.refs[i]
	encodeFloor(w, api.SelectResponse{Index: i, ID: ref.ID, URL: ref.URL, NodeID: ref.NodeID, LeaseID: floorLease})
}

func (f *floorServer) release(w http.ResponseWriter, r *http.Request) {
	var req api.ReleaseRequest
	if !decodeFloor(w, r, &req) {
		return
	}
	i := f.pick()
	encodeFloor(w, api.ReleaseResponse{Released: true, LeaseID: req.LeaseID, Index: &i, ID: f.refs[i].ID})
}

// assign answers num_tasks indices in turn over the policies (or over
// current_loads when given), and names each index it used, as the router
// does.
func (f *floorServer) assign(w http.ResponseWriter, r *http.Request) {
	var req api.AssignRequest
	if !decodeFloor(w, r, &req) {
		return
	}
	p := f.policies
	if len(req.CurrentLoads) > 0 {
		p = min(len(req.CurrentLoads), f.policies)
	}
	n := 0
	if req.NumTasks != nil {
		n = min(max(*req.NumTasks, 0), maxTasks)
	}
	resp := api.AssignResponse{Assignments: make([]int, n)}
	first := f.pick()
	for k := range resp.Assignments {
		resp.Assignments[k] = (first + k) % p
	}
	if n >= p && p == f.policies {
		resp.Policies = f.all
	} else {
		resp.Policies = make(map[string]api.PolicyRef, min(n, p))
		for _, i := range resp.Assignments[:min(n, p)] {
			resp.Policies[strconv.Itoa(i)] = f.refs[i]
		}
	}
	encodeFloor(w, resp)
}

func decodeFloor(w http.ResponseWriter, r *http.Request, dst any) bool {
	if err := json.NewDecoder(r.Body).Decode(dst); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func encodeFloor(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
