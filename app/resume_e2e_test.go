package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/proxy"
)

// e2eStream is one client's streamed /generate through the router.
type e2eStream struct {
	status  int
	chunks  []e2eChunk
	done    int // [DONE] events
	trailer http.Header
	err     error
}

type e2eChunk struct {
	Text      string  `json:"text"`
	OutputIDs []int64 `json:"output_ids"`
	Meta      struct {
		CompletionTokens int             `json:"completion_tokens"`
		FinishReason     json.RawMessage `json:"finish_reason"`
		Segments         []struct {
			PolicyIndex   int    `json:"policy_index"`
			WeightVersion string `json:"weight_version"`
			RouterVersion int64  `json:"router_version"`
			Start         int    `json:"start"`
			End           int    `json:"end"`
		} `json:"segments"`
		WeightVersions []struct {
			Version    string `json:"version"`
			Start, End int
		} `json:"weight_versions"`
	} `json:"meta_info"`
}

func (c e2eChunk) finish() string {
	var f struct{ Type string }
	_ = json.Unmarshal(c.Meta.FinishReason, &f)
	return f.Type
}

// rollingUpdateStreams runs `streams` streamed /generate requests of
// `tokens` tokens through a router in front of two simulated SGLang
// engines at weight version 1, and while every one of them is in flight
// rolls version 2 through the engines one at a time with pause_mode
// abort (POST /updates). It returns each stream and its prompt.
func rollingUpdateStreams(t *testing.T, streams, tokens int, hdr map[string]string) ([]e2eStream, [][]int64) {
	t.Helper()
	fleet, err := fakepolicy.New(2, rand.NewPCG(1, 2), fakepolicy.Options{Engine: fakepolicy.EngineSGLang, TokensPerSecond: 25})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	for i := range 2 {
		fleet.Policy(i).SetWeightVersion("1")
	}
	cfg := DefaultConfig()
	cfg.Addr = ""
	cfg.Logger = slog.New(slog.DiscardHandler)
	// The machine may be loaded: a probe that times out makes a policy
	// unhealthy after --fail-threshold in a row, which is not what this
	// test is about, so probes get more time than the default.
	cfg.PollTimeout = 5 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	a, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	run := make(chan error, 1)
	go func() { run <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-run; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams}}
	defer client.CloseIdleConnections()
	call := func(method, path, body string, want int) []byte {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != want {
			t.Fatalf("%s %s: %d %s; want %d", method, path, res.StatusCode, b, want)
		}
		return b
	}
	registerSGLangPair(t, a, srv.URL, fleet, streams)

	results := make([]e2eStream, streams)
	prompts := make([][]int64, streams)
	var chunks atomic.Int64 // chunks read, over every stream
	var wg sync.WaitGroup
	for i := range streams {
		prompts[i] = []int64{int64(i), 11, 12}
		body, _ := json.Marshal(map[string]any{"input_ids": prompts[i], "stream": true,
			"sampling_params": map[string]any{"max_new_tokens": tokens, "temperature": 0}})
		wg.Go(func() { results[i] = readStream(client, srv.URL, body, hdr, &chunks) })
	}
	poll.Until(t, "every stream in flight, with a few tokens each", func() bool {
		return fleet.Policy(0).Load()+fleet.Policy(1).Load() == streams && chunks.Load() >= int64(3*streams)
	})
	if fleet.Policy(0).Load() == 0 || fleet.Policy(1).Load() == 0 {
		t.Fatalf("loads %d and %d: the streams should run on both engines", fleet.Policy(0).Load(), fleet.Policy(1).Load())
	}
	var u struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	_ = json.Unmarshal(call("POST", "/updates", `{"version": 2, "model_path": "/ckpt/step-2", "pause_mode": "abort", "max_unavailable": 1}`, http.StatusAccepted), &u)
	wg.Wait()
	poll.Until(t, "the update to succeed", func() bool {
		_ = json.Unmarshal(call("GET", "/updates/"+u.ID, "", http.StatusOK), &u)
		return u.State == "succeeded"
	})
	for i := range 2 {
		if calls := strings.Join(fleet.Policy(i).Calls(), " "); !strings.Contains(calls, "/pause_generation") || fleet.Policy(i).PauseMode() != "abort" {
			t.Errorf("engine %d: calls %s; want a pause in mode abort", i, calls)
		}
	}
	return results, prompts
}

// readStream posts a streamed /generate and reads it to its end.
func readStream(client *http.Client, url string, body []byte, hdr map[string]string, chunks *atomic.Int64) e2eStream {
	req, _ := http.NewRequest(http.MethodPost, url+"/generate", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := client.Do(req)
	if err != nil {
		return e2eStream{err: err}
	}
	defer res.Body.Close()
	s := e2eStream{status: res.StatusCode}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		switch {
		case !ok:
		case data == "[DONE]":
			s.done++
		default:
			var c e2eChunk
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				s.err = err
				return s
			}
			s.chunks = append(s.chunks, c)
			chunks.Add(1)
		}
	}
	s.err, s.trailer = sc.Err(), res.Trailer
	return s
}

// Must hold: 64 streams in flight through a rolling update with
// pause_mode abort all complete 200, each equal token for token to the
// uninterrupted generation, its segments naming both weight versions.
func TestRollingUpdateResumesStreams(t *testing.T) {
	const streams, tokens = 64, 100
	results, prompts := rollingUpdateStreams(t, streams, tokens, nil)
	for i, s := range results {
		if s.err != nil || s.status != http.StatusOK || len(s.chunks) == 0 || s.done != 1 {
			t.Errorf("stream %d: %d, %d chunks, %d [DONE], %v; want 200 and one [DONE]", i, s.status, len(s.chunks), s.done, s.err)
			continue
		}
		want, _ := fakepolicy.Continuation(prompts[i], tokens)
		var ids []int64
		for j, c := range s.chunks {
			// SGLang's default chunks: each holds every token so far.
			if len(c.OutputIDs) < len(ids) || !slices.Equal(c.OutputIDs[:len(ids)], ids) || c.Meta.CompletionTokens != len(c.OutputIDs) {
				t.Errorf("stream %d, chunk %d: %d output_ids (completion_tokens %d) do not extend the %d before", i, j, len(c.OutputIDs), c.Meta.CompletionTokens, len(ids))
				break
			}
			if (c.finish() != "") != (j == len(s.chunks)-1) {
				t.Errorf("stream %d, chunk %d of %d: finish_reason %s", i, j, len(s.chunks), c.Meta.FinishReason)
				break
			}
			ids = c.OutputIDs
		}
		last := s.chunks[len(s.chunks)-1]
		if !slices.Equal(ids, want) || last.Text != fakepolicy.Detokenize(want) || last.finish() != "length" {
			t.Errorf("stream %d: %d output_ids, finish %q; want the uninterrupted %d, length", i, len(ids), last.finish(), tokens)
			continue
		}
		versions := map[string]bool{}
		end := 0
		for _, seg := range last.Meta.Segments {
			if seg.Start != end {
				t.Errorf("stream %d: segments %+v do not follow on", i, last.Meta.Segments)
			}
			end = seg.End
			versions[seg.WeightVersion] = true
			if strconv.FormatInt(seg.RouterVersion, 10) != seg.WeightVersion {
				t.Errorf("stream %d: segment %+v names router version %d for the engine's %q", i, seg, seg.RouterVersion, seg.WeightVersion)
			}
		}
		if end != tokens || !versions["1"] || !versions["2"] || s.trailer.Get(proxy.HeaderResume) != "resumed" ||
			!strings.HasPrefix(s.trailer.Get(proxy.HeaderWeightVersions), "1:0-") || !strings.HasSuffix(s.trailer.Get(proxy.HeaderWeightVersions), "-"+strconv.Itoa(tokens)) {
			t.Errorf("stream %d: segments %+v, trailers %v; want segments of versions 1 and 2 over all %d tokens, resumed", i, last.Meta.Segments, s.trailer, tokens)
		}
	}
}

// The same run with X-Resume-On-Abort: 0: the aborts pass through, each
// stream ending with the engine's abort and the tokens it had.
func TestRollingUpdateStreamsOptOut(t *testing.T) {
	const streams, tokens = 64, 100
	results, prompts := rollingUpdateStreams(t, streams, tokens, map[string]string{proxy.HeaderResumeOnAbort: "0"})
	for i, s := range results {
		if s.err != nil || s.status != http.StatusOK || len(s.chunks) == 0 || s.done != 1 {
			t.Errorf("stream %d: %d, %d chunks, %d [DONE], %v; want 200 and one [DONE]", i, s.status, len(s.chunks), s.done, s.err)
			continue
		}
		last := s.chunks[len(s.chunks)-1]
		want, _ := fakepolicy.Continuation(prompts[i], tokens)
		if last.finish() != "abort" || len(last.OutputIDs) >= tokens || !slices.Equal(last.OutputIDs, want[:len(last.OutputIDs)]) ||
			last.Meta.Segments != nil || len(s.trailer) != 0 {
			t.Errorf("stream %d: finish %q, %d output_ids, segments %+v, trailers %v; want the engine's abort as it sent it",
				i, last.finish(), len(last.OutputIDs), last.Meta.Segments, s.trailer)
		}
	}
}
