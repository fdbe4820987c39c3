package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/client"
)

// Workload names, as -workloads takes them.
const (
	wSelectNodeAffinity = "select_node_affinity"
	wSelectIdleAffinity = "select_idle_affinity"
	wSelectSimple       = "select_release_simple"
	wAssign1            = "assign_1_tracked"
	wAssignBigStateless = "assign_big_stateless"
	wAssignBigTracked   = "assign_big_tracked"
	// wSeed is not an HTTP workload: it times the seed's algorithms in
	// Python against the Go routing core.
	wSeed = "seed"
)

func allWorkloadNames() []string {
	return []string{wSelectNodeAffinity, wSelectIdleAffinity, wSelectSimple, wAssign1, wAssignBigStateless, wAssignBigTracked, wSeed}
}

// workload is one HTTP load: what one operation sends, on how many
// policies. Both servers serve the same paths, so one op drives either.
type workload struct {
	Name string
	Desc string
	// Policies and Nodes size the fleet and its topology.
	Policies, Nodes int
	// Requests is the number of HTTP requests one operation sends.
	Requests int
	// Endpoint is the routing endpoint whose decision time is reported.
	Endpoint string
	// Unloaded asks for a last router phase at concurrency 1, for the
	// server time without queueing.
	Unloaded bool
	op       opFunc
}

// opFunc runs one operation against the server at base, for client
// goroutine worker on its seq-th operation.
type opFunc func(ctx context.Context, c *client.Client, worker, seq int) error

// newWorkload returns the named HTTP workload for cfg.
func newWorkload(name string, cfg config) workload {
	switch name {
	case wSelectNodeAffinity:
		bodies := selectBodies(cfg.Policies, "node_affinity")
		return workload{
			Name: name, Policies: cfg.Policies, Nodes: cfg.Nodes, Requests: 1, Endpoint: "select",
			Desc: "POST /select, router node_affinity (the seed's per-node round robin; never waits), env ids over every node",
			op: func(ctx context.Context, c *client.Client, worker, seq int) error {
				return c.Do(ctx, http.MethodPost, "/select", bodies[envFor(worker, seq, cfg)], nil)
			},
		}
	case wSelectIdleAffinity:
		return selectRelease(name, "idle_affinity", cfg,
			"POST /select, router idle_affinity (per-node idle deques), then POST /release of its lease: one op, two requests")
	case wSelectSimple:
		return selectRelease(name, api.RouterSimple, cfg,
			"POST /select, router simple (the seed's FIFO idle deque), then POST /release of its lease: one op, two requests")
	case wAssign1:
		body := []byte(`{"num_tasks":1}`)
		return workload{
			Name: name, Policies: cfg.Policies, Nodes: cfg.Nodes, Requests: 1, Endpoint: "assign",
			Desc: "POST /assign of 1 task on the tracked loads, router simple",
			op: func(ctx context.Context, c *client.Client, _, _ int) error {
				return c.Do(ctx, http.MethodPost, "/assign", body, nil)
			},
		}
	case wAssignBigStateless:
		var b strings.Builder
		fmt.Fprintf(&b, `{"num_tasks":%d,"current_loads":[`, cfg.AssignTasks)
		for i, l := range seedLoads(cfg.AssignPolicies) {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(l, 10))
		}
		b.WriteString("]}")
		body := []byte(b.String())
		return workload{
			Name: name, Policies: cfg.AssignPolicies, Nodes: cfg.AssignNodes, Requests: 1, Endpoint: "assign", Unloaded: true,
			Desc: fmt.Sprintf("POST /assign of %d tasks with current_loads of %d policies (stateless), router simple", cfg.AssignTasks, cfg.AssignPolicies),
			op: func(ctx context.Context, c *client.Client, _, _ int) error {
				return c.Do(ctx, http.MethodPost, "/assign", body, nil)
			},
		}
	case wAssignBigTracked:
		body := fmt.Appendf(nil, `{"num_tasks":%d}`, cfg.AssignTasks)
		return workload{
			Name: name, Policies: cfg.AssignPolicies, Nodes: cfg.AssignNodes, Requests: 1, Endpoint: "assign", Unloaded: true,
			Desc: fmt.Sprintf("POST /assign of %d tasks over %d registered policies' tracked loads, router simple", cfg.AssignTasks, cfg.AssignPolicies),
			op: func(ctx context.Context, c *client.Client, _, _ int) error {
				return c.Do(ctx, http.MethodPost, "/assign", body, nil)
			},
		}
	}
	panic("unknown workload " + name)
}

// errLeaseGone: the op's /release found its lease already freed by the
// poller. The op counts as done, and is counted apart.
var errLeaseGone = errors.New("lease already freed by the poller")

// selectRelease is a workload whose op selects a policy and releases it.
func selectRelease(name, router string, cfg config, desc string) workload {
	bodies := selectBodies(cfg.Policies, router)
	return workload{
		Name: name, Policies: cfg.Policies, Nodes: cfg.Nodes, Requests: 2, Endpoint: "select", Desc: desc,
		op: func(ctx context.Context, c *client.Client, worker, seq int) error {
			var sel api.SelectResponse
			if err := c.Do(ctx, http.MethodPost, "/select", bodies[envFor(worker, seq, cfg)], &sel); err != nil {
				return err
			}
			if sel.LeaseID == "" {
				return fmt.Errorf("%s/select: no lease_id in the answer", c.BaseURL())
			}
			var rel api.ReleaseResponse
			if err := c.Do(ctx, http.MethodPost, "/release", []byte(`{"lease_id":"`+sel.LeaseID+`"}`), &rel); err != nil {
				return err
			}
			if !rel.Released {
				// The poller saw the policy idle more than the grace period
				// after the selection and freed it first: the design's
				// answer to a stalled client, not a failure.
				return errLeaseGone
			}
			return nil
		},
	}
}

// selectBodies returns the /select body of each env worker 0..n-1.
func selectBodies(n int, router string) [][]byte {
	out := make([][]byte, n)
	for e := range out {
		out[e] = []byte(`{"env_id":"env-` + strconv.Itoa(e) + `","router":"` + router + `"}`)
	}
	return out
}

// envFor spreads the client goroutines' env workers over every worker, and
// so over every node.
func envFor(worker, seq int, cfg config) int {
	return (worker + seq*cfg.Concurrency) % cfg.Policies
}
