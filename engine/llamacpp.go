package engine

import (
	"context"
	"errors"
	"fmt"
)

// LlamaCpp is the registration name of llama.cpp's server.
const LlamaCpp = "llamacpp"

// llamacpp speaks to llama.cpp's HTTP server (llama-server), in the wire
// formats of tools/server/server-context.cpp (ggml-org/llama.cpp commit
// fb4026604c67, server_routes::init_routes: the handlers) and
// tools/server/server.cpp (commit aa6192d38def, main: the routes).
//
// Probe:
//   - load: GET /slots, the slots whose "is_processing" is true. The
//     endpoint is on by default (--no-slots turns it off: 501 "This server
//     does not support slots endpoint. Start it with `--slots`"). It counts
//     the requests running; those deferred for want of a free slot are not
//     in it, so a server whose slots are all taken reads as busy at its
//     capacity, never as idle;
//   - models: GET /v1/models ({"object": "list", "data": [{"id"}]}), on the
//     first probe and every ModelsEvery;
//   - version, paused, asleep: the server has none of them;
//   - health: when /slots fails, GET /health (200 {"status": "ok"}, 503
//     while the model loads) says whether the server itself is up.
//
// Capacity: GET /props' "total_slots" (params_base.n_parallel, served
// whatever the flags).
//
// Update steps: none. llama-server loads its weights at start and has no
// call to replace them, so a rolling update drains each policy (pause
// mode "wait" only) and waits for the trainer's done, as for the native
// engine. No lifecycle calls either: the fleet's sleep and wake skip it.
type llamacpp struct{}

var _ Engine = llamacpp{}

// Routes: the OpenAI-compatible API (ctx_http.post("/v1/completions"),
// post("/v1/chat/completions"), get("/v1/models") in main of
// tools/server/server.cpp). Its native POST /completion is not a proxied
// route, and it has no SGLang-native /generate.
func (llamacpp) Routes() []string { return openAIRoutes }

func (llamacpp) PauseModes() []string                     { return []string{PauseWait} }
func (llamacpp) Pause(string) (Call, bool)                { return Call{}, false }
func (llamacpp) LoadFromDisk(string, string) (Call, bool) { return Call{}, false }
func (llamacpp) SetVersion(string) (Call, bool)           { return Call{}, false }
func (llamacpp) Resume() (Call, bool)                     { return Call{}, false }
func (llamacpp) Sleep(int) (Call, bool)                   { return Call{}, false }
func (llamacpp) Wake([]string) (Call, bool)               { return Call{}, false }
func (llamacpp) SleepReported() bool                      { return true }

// llamacppSlot is one slot of GET /slots, server_slot::to_json: {"id",
// "n_ctx", "speculative", "is_processing", and, once it ran a task,
// "id_task", "params", "next_token"}. is_processing is state !=
// SLOT_STATE_IDLE.
type llamacppSlot struct {
	IsProcessing *bool `json:"is_processing"`
}

const llamacppSlotsPath = "/slots"

func (llamacpp) Probe(ctx context.Context, c *Client, s *Server) (Answer, error) {
	var slots []llamacppSlot
	if err := c.getJSON(ctx, s, llamacppSlotsPath, &slots); err != nil {
		if _, herr := c.get(ctx, s, "/health", MaxJSONBytes); herr == nil {
			return Answer{}, fmt.Errorf("%w (GET /health answers: the server is up, but its slots are not shown; was it started with --no-slots?)", err)
		}
		return Answer{}, err
	}
	if len(slots) == 0 {
		return Answer{}, endpointError(s, llamacppSlotsPath, errors.New("answer has no slots"))
	}
	var load int64
	for i, sl := range slots {
		if sl.IsProcessing == nil {
			return Answer{}, endpointError(s, llamacppSlotsPath, fmt.Errorf(`slot [%d] has no boolean "is_processing"`, i))
		}
		if *sl.IsProcessing {
			load++
		}
	}
	var a Answer
	idleBelow(&a, load, s.Policy.Capacity)
	c.probeModels(ctx, s, &a)
	return a, nil
}

// LlamaCppDefaultCapacity is the capacity of a llama.cpp server whose
// /props does not answer (DefaultCapacity): the slots llama-server runs
// when started without --parallel. Its default is 1, which main in
// tools/server/server.cpp (commit aa6192d38def) raises: "setting
// n_parallel = 4 and kv_unified = true".
const LlamaCppDefaultCapacity = 4

// llamacppProps is the part of GET /props that says how many requests
// the server runs at once: "total_slots", params_base.n_parallel.
type llamacppProps struct {
	TotalSlots *int `json:"total_slots"`
}

var _ capacityReporter = llamacpp{}

func (llamacpp) defaultCapacity() int { return LlamaCppDefaultCapacity }

func (llamacpp) reportedCapacity(ctx context.Context, c *Client, s *Server) (int, error) {
	const path = "/props"
	var v llamacppProps
	if err := c.getJSON(ctx, s, path, &v); err != nil {
		return 0, err
	}
	if v.TotalSlots == nil || *v.TotalSlots < 1 {
		return 0, endpointError(s, path, errors.New(`answer has no positive "total_slots"`))
	}
	return *v.TotalSlots, nil
}
