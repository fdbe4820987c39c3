package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/policyrouter/policyrouter/api"
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
	return []string{wSelectNodeAffinity, wSelectIdleAffinity, wSelectSimple, wAssign1, wAssignBigStateless, wAssignBigTracked, wSeed, wMultiTurn, wUpdateCycle}
}

// defaultWorkloads are all but the multi-turn run, which measures the
// sticky stage's effect rather than the router's cost.
func defaultWorkloads() []string {
	return slices.DeleteFunc(allWorkloadNames(), func(w string) bool { return w == wMultiTurn || w == wUpdateCycle })
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
type opFunc func(ctx context.Context, c *http.Client, base string, worker, seq int) error

// newWorkload returns the named HTTP workload for cfg.
func newWorkload(name string, cfg config) workload {
	switch name {
	case wSelectNodeAffinity:
		bodies := selectBodies(cfg.Policies, "node_affinity")
		return workload{
			Name: name, Policies: cfg.Policies, Nodes: cfg.Nodes, Requests: 1, Endpoint: "select",
			Desc: "POST /select, router node_affinity (the seed's per-node round robin; never waits), env ids over every node",
			op: func(ctx context.Context, c *http.Client, base string, worker, seq int) error {
				return post(ctx, c, base+"/select", bodies[envFor(worker, seq, cfg)], nil)
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
			op: func(ctx context.Context, c *http.Client, base string, _, _ int) error {
				return post(ctx, c, base+"/assign", body, nil)
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
			op: func(ctx context.Context, c *http.Client, base string, _, _ int) error {
				return post(ctx, c, base+"/assign", body, nil)
			},
		}
	case wAssignBigTracked:
		body := fmt.Appendf(nil, `{"num_tasks":%d}`, cfg.AssignTasks)
		return workload{
			Name: name, Policies: cfg.AssignPolicies, Nodes: cfg.AssignNodes, Requests: 1, Endpoint: "assign", Unloaded: true,
			Desc: fmt.Sprintf("POST /assign of %d tasks over %d registered policies' tracked loads, router simple", cfg.AssignTasks, cfg.AssignPolicies),
			op: func(ctx context.Context, c *http.Client, base string, _, _ int) error {
				return post(ctx, c, base+"/assign", body, nil)
			},
		}
	}
	panic("unknown workload " + name)
}

// errLeaseGone: the op's /release found its lease already freed by the
// poller. The op counts as done, and is counted apart.
var errLeaseGone = errors.New("lease already freed by the poller")

// statusError is an answer other than 2xx.
type statusError struct {
	Method string
	URL    string
	Code   int
	Body   string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.URL, e.Code, e.Body)
}

// selectRelease is a workload whose op selects a policy and releases it.
func selectRelease(name, router string, cfg config, desc string) workload {
	bodies := selectBodies(cfg.Policies, router)
	return workload{
		Name: name, Policies: cfg.Policies, Nodes: cfg.Nodes, Requests: 2, Endpoint: "select", Desc: desc,
		op: func(ctx context.Context, c *http.Client, base string, worker, seq int) error {
			var sel api.SelectResponse
			if err := post(ctx, c, base+"/select", bodies[envFor(worker, seq, cfg)], &sel); err != nil {
				return err
			}
			if sel.LeaseID == "" {
				return fmt.Errorf("%s/select: no lease_id in the answer", base)
			}
			var rel api.ReleaseResponse
			if err := post(ctx, c, base+"/release", []byte(`{"lease_id":"`+sel.LeaseID+`"}`), &rel); err != nil {
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

// post sends body as JSON with POST; see send.
func post(ctx context.Context, c *http.Client, url string, body []byte, out any) error {
	return send(ctx, c, http.MethodPost, url, body, out)
}

// call sends v, encoded as JSON, with the given method; see send.
func call(ctx context.Context, c *http.Client, method, url string, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return send(ctx, c, method, url, body, nil)
}

// send sends body as JSON and checks for a 2xx (a *statusError otherwise);
// it decodes the answer into out when out is non-nil, and reads the body to
// its end either way, so that the connection is reused.
func send(ctx context.Context, c *http.Client, method, url string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		_, _ = io.Copy(io.Discard, resp.Body)
		return &statusError{Method: method, URL: url, Code: resp.StatusCode, Body: string(bytes.TrimSpace(msg))}
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("%s %s: decode the answer: %w", method, url, err)
		}
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}
