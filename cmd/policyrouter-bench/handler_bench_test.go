package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/internal/benchkit"
)

// BenchmarkHandler times one request through each server's handler, in
// process and without the network, so that the router's cost above the
// floor's shows without the kernel's and the client's share:
//
//	go test -run '^$' -bench Handler -benchmem ./cmd/policyrouter-bench/
//	go test -run '^$' -bench 'Handler/select_node_affinity/router' -cpuprofile cpu.out ./cmd/policyrouter-bench/
func BenchmarkHandler(b *testing.B) {
	cfg, err := parseConfig([]string{"-poll-interval", "0"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	client := benchkit.NewClient(1)
	defer client.CloseIdleConnections()
	var loads strings.Builder
	for i, l := range seedLoads(cfg.AssignPolicies) {
		if i > 0 {
			loads.WriteByte(',')
		}
		loads.WriteString(strconv.FormatInt(l, 10))
	}
	cases := []struct {
		name, path, body string
		big              bool
	}{
		{wSelectNodeAffinity, "/select", `{"env_id":"env-5","router":"node_affinity"}`, false},
		{wSelectSimple, "/select", `{"env_id":"env-5","router":"simple"}`, false},
		{wAssign1, "/assign", `{"num_tasks":1}`, false},
		{wAssignBigStateless, "/assign", fmt.Sprintf(`{"num_tasks":%d,"current_loads":[%s]}`, cfg.AssignTasks, loads.String()), true},
		{wAssignBigTracked, "/assign", fmt.Sprintf(`{"num_tasks":%d}`, cfg.AssignTasks), true},
	}
	rt, err := benchkit.Start(context.Background(), benchkit.Config{Policies: cfg.Policies, Nodes: cfg.Nodes, LogLevel: "warn"}, client)
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	floor, err := startFloor(cfg.Policies, cfg.Nodes)
	if err != nil {
		b.Fatal(err)
	}
	defer floor.Close()
	bigRT, err := benchkit.Start(context.Background(), benchkit.Config{Policies: cfg.AssignPolicies, Nodes: cfg.AssignNodes, LogLevel: "warn"}, client)
	if err != nil {
		b.Fatal(err)
	}
	defer bigRT.Close()
	bigFloor, err := startFloor(cfg.AssignPolicies, cfg.AssignNodes)
	if err != nil {
		b.Fatal(err)
	}
	defer bigFloor.Close()
	for _, c := range cases {
		for _, side := range []struct {
			name string
			h    http.Handler
		}{{"floor", floor.srv.Handler}, {"router", rt.Handler()}} {
			if c.big {
				side.h = map[string]http.Handler{"floor": bigFloor.srv.Handler, "router": bigRT.Handler()}[side.name]
			}
			b.Run(c.name+"/"+side.name, func(b *testing.B) {
				body := []byte(c.body)
				b.ReportAllocs()
				for b.Loop() {
					rec := serve(b, side.h, c.path, body)
					if c.name == wSelectSimple {
						// One op is the select and the release of its lease,
						// on both sides, as in the HTTP workload.
						idx := bytes.Index(rec.Body.Bytes(), []byte(`"lease_id":"`))
						if idx < 0 {
							b.Fatalf("no lease in %s", rec.Body)
						}
						lease := rec.Body.Bytes()[idx+12 : idx+12+36]
						serve(b, side.h, "/release", []byte(`{"lease_id":"`+string(lease)+`"}`))
					}
				}
			})
		}
	}
}

// serve sends one JSON POST through h and checks for a 200.
func serve(tb testing.TB, h http.Handler, path string, body []byte) *httptest.ResponseRecorder {
	tb.Helper()
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		tb.Fatalf("POST %s: %d %s", path, rec.Code, rec.Body)
	}
	return rec
}
