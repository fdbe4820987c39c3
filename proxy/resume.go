package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/policyrouter/policyrouter/metrics"
)

// Resume on abort (--proxy-resume). A rolling update with pause_mode
// abort, or an engine's POST /abort_request, ends SGLang generations in
// flight with meta_info.finish_reason {"type": "abort", ...} and the
// tokens generated so far. RL frameworks then do a chore by hand: slime
// keeps the prefix, reduces max_new_tokens by the response length and
// sends input_ids + the tokens so far again (THUDM/slime
// slime/rollout/sglang_rollout.py, generate and _prepare_prompt_ids,
// commit 624b824a898a; --partial-rollout, and
// --mask-offpolicy-in-partial-rollout masks the prefix). The proxy does it
// instead, for a native POST /generate whose prompt is input_ids: the
// continuation goes to another eligible policy (the aborting one
// excluded), up to --proxy-retries, and the client gets one
// answer, as if nothing had happened but for the segments it names.
//
// Wire formats, from sgl-project/sglang:
//   - the request is GenerateReqInput (python/sglang/srt/managers/
//     io_struct.py, commit 001067fffe33): text or input_ids (a list, or a
//     list of lists for a batch), sampling_params (max_new_tokens, default
//     128 in python/sglang/srt/sampling/sampling_params.py, commit
//     00c17cafcb9e; min_new_tokens; n; json_schema, regex, ebnf,
//     structural_tag), return_logprob, logprob_start_len, stream, rid;
//   - the answer is built in tokenizer_manager_components/
//     output_processor.py (commit 7a464c40fc21): {"text", "output_ids",
//     "meta_info": {"id", "finish_reason", "prompt_tokens",
//     "weight_version", "completion_tokens", "cached_tokens", ...}}, with
//     return_logprob "output_token_logprobs" ([logprob, token_id, text]
//     triples), "output_token_logprobs_length", "input_token_logprobs" and
//     top/ids variants (logprob_ops.py, commit 229224a3f405);
//   - an abort is FINISH_ABORT.to_json, {"type": "abort", "message",
//     "status_code", "err_type"} (schedule_batch.py); one with status
//     code 503 or 500 becomes an HTTP error of that status, one without
//     a 200 answer (response_emitter.py, commit 5bf23cf6bf99);
//   - SGLang's own weight-version spans, for updates in place, are
//     meta_info.weight_versions [{"version", "start", "end"}] over the
//     output tokens (python/sglang/srt/utils/weight_versions.py, commit
//     19f93835d3f8): the merged answer extends them across segments.
//
// A streamed /generate is resumed too, as one stream in SGLang's chunk
// format (resume_stream.go).

// Headers of resumable requests and resumed answers.
const (
	// HeaderResumeOnAbort opts a request out (0) of resuming, or in (1,
	// the default when --proxy-resume is on).
	HeaderResumeOnAbort = "X-Resume-On-Abort"
	// HeaderResume says what became of resuming: "resumed" (the answer
	// joins segments from several policies), "incomplete (why)" (it was
	// aborted and could not be resumed further: the tokens so far, with
	// the abort) or "unavailable (why)" (it could not be resumed at all,
	// and passed through as the policy answered).
	HeaderResume = "X-Resume"
	// HeaderWeightVersions names the weight versions of an answer's
	// output tokens, each the engine's label (else the router's integer
	// version): "version:start-end,..." for the segments of a resumed
	// answer and a resumable stream's trailer; "version" alone, every
	// output token, for an answer never resumed that passes through as
	// the engine sent it.
	HeaderWeightVersions = "X-Weight-Versions"
)

// resumeMaxAnswer is the largest answer the proxy reads to resume; a
// larger one passes through.
const resumeMaxAnswer = 64 << 20

// sglangDefaultMaxNewTokens is SamplingParams.max_new_tokens' default.
const sglangDefaultMaxNewTokens = 128

// errResume ends an attempt whose answer was aborted and is to be
// continued on another policy. It wraps errRetryable, so ReverseProxy's
// ErrorHandler marks the attempt for another try and writes nothing.
var errResume = errors.Join(errRetryable, errors.New("resume an aborted answer"))

// concatMeta are the meta_info lists of output positions, joined across
// segments; the input_* lists are the first segment's.
var concatMeta = []string{"output_token_logprobs", "output_top_logprobs", "output_token_ids_logprobs"}

// resumeState is one resumable request: the client's request, the
// segments answered so far and the continuation to send next.
type resumeState struct {
	raw      []byte                     // the client's request
	req      map[string]json.RawMessage // and its fields, once a continuation needs them
	sampling map[string]json.RawMessage
	prompt   []int64
	maxNew   *int // nil: no bound (max_new_tokens null)
	minNew   int
	body     []byte // what the next attempt sends
	left     int    // further policies it may go to

	segs   []resumeSegment
	spans  []weightSpan
	ids    []int64
	text   strings.Builder
	noText bool
	lists  map[string][]json.RawMessage // concatMeta, while every segment has them
	first  map[string]json.RawMessage   // the first segment's meta_info
	last   map[string]json.RawMessage   // the last answer, and its meta_info
	meta   map[string]json.RawMessage
	cached int64

	// abortedOn is the policy whose abort the next attempt continues: it
	// is left out of that attempt only (it may be paused for an update,
	// and serve again after it), unlike a policy that failed.
	abortedOn  string
	stream     *streamState     // a streamed request's (resume_stream.go), or nil
	completion *completionState // a /v1/completions request's (resume_completions.go), or nil
}

// resumeSegment is what one policy generated of a resumed answer, in
// meta_info.segments.
type resumeSegment struct {
	PolicyID      string          `json:"policy_id"`
	PolicyIndex   int             `json:"policy_index"`
	WeightVersion string          `json:"weight_version"`
	Start         int             `json:"start"`
	End           int             `json:"end"`
	FinishReason  json.RawMessage `json:"finish_reason"`
	RouterVersion int64           `json:"router_version"` // the router's version of the policy at dispatch
}

// weightSpan is SGLang's WeightVersionSpan.
type weightSpan struct {
	Version string `json:"version"`
	Start   int    `json:"start"`
	End     int    `json:"end"`
}

// resumeFor says whether a proxied request is resumed on abort: its state
// when it is, nil when not. A /generate request that cannot be is marked
// so (X-Resume: unavailable) on w; a malformed X-Resume-On-Abort is a 422.
func (p *Proxy) resumeFor(w http.ResponseWriter, r *http.Request, f *fields) (*resumeState, error) {
	if !p.Resume || (r.URL.Path != "/generate" && r.URL.Path != "/v1/completions") {
		return nil, nil
	}
	if on, err := onOff(r.Header, canonicalResumeOnAbort, HeaderResumeOnAbort, true); !on || err != nil {
		return nil, err
	}
	rs, why := parseFor(r.URL.Path, f)
	if why != "" {
		w.Header().Set(HeaderResume, "unavailable ("+why+")")
		return nil, nil
	}
	rs.body, rs.left = f.raw, p.Retries
	if rs.stream != nil {
		rs.stream.forms = p.StreamForms
	}
	return rs, nil
}

// The resume layer's part in run, nil-safe so that run reads the same for
// a request that is not resumed (rs nil).

// began reports whether the client's answer has begun: a resumed answer
// holds tokens (a stream has streamed), so that running out of policies
// ends it with them rather than with an error.
func (rs *resumeState) began() bool {
	switch {
	case rs == nil:
		return false
	case rs.stream != nil:
		return rs.stream.started
	}
	return len(rs.segs) > 0
}

// writer is where an attempt's answer goes: the client's ResponseWriter,
// but for a stream's continuation, whose head went out already.
func (rs *resumeState) writer(w http.ResponseWriter) http.ResponseWriter {
	if rs == nil || rs.stream == nil {
		return w
	}
	st := rs.stream
	st.live = false
	if !st.started {
		return w
	}
	return &continuationWriter{w: w, st: st, header: make(http.Header)}
}

// next is what the next attempt sends: the client's body, or the
// continuation.
func (rs *resumeState) next(body []byte) []byte {
	if rs == nil {
		return body
	}
	return rs.body
}

// done reports whether the client's stream is over: ended, or the client
// left.
func (rs *resumeState) done(r *http.Request) bool {
	return rs != nil && rs.stream != nil && (rs.stream.done || r.Context().Err() != nil)
}

// end answers with what the segments so far hold, when no further policy
// continues them; why says what kept the answer incomplete.
func (rs *resumeState) end(w http.ResponseWriter, why string) {
	switch {
	case rs == nil:
	case rs.stream != nil:
		if rs.stream.started && !rs.stream.done {
			rs.endStream(w, why)
		}
	case len(rs.segs) > 0:
		rs.writePartial(w, why)
	}
}

// endFailed ends a stream whose continuation failed without an answer
// (run's attempt answered it, into the continuation's writer); any other
// answer is whole already.
func (rs *resumeState) endFailed(w http.ResponseWriter, why string) {
	if rs != nil && rs.stream != nil {
		rs.end(w, why)
	}
}

// trailers names the segments in the stream's trailers, announced by its
// head, once the stream is over.
func (rs *resumeState) trailers(w http.ResponseWriter) {
	if rs == nil || rs.stream == nil {
		return
	}
	if st := rs.stream; st.started && len(rs.segs) > 0 {
		rs.setHeaders(w.Header(), st.why)
	}
}

// exclude returns the policies the next attempt leaves out, after one on
// id: every policy that failed, and id itself when it aborted the answer
// (it may be paused for an update, and serve again after it).
func (rs *resumeState) exclude(failed []string, id string) (stillFailed, exclude []string) {
	if rs != nil {
		rs.left--
		if rs.abortedOn == id {
			rs.abortedOn = ""
			return failed, append(slices.Clip(failed), id)
		}
	}
	failed = append(failed, id)
	return failed, failed
}

// availableBeyond reports whether a policy outside exclude can route; not
// when the Leaser cannot say.
func (p *Proxy) availableBeyond(ctx context.Context, exclude []string) bool {
	available, err := p.Leaser.Available(ctx)
	if err != nil {
		return false
	}
	for _, pol := range available {
		if !slices.Contains(exclude, pol.ID) {
			return true
		}
	}
	return false
}

// observeResume counts how an interrupted generation ended, from what
// its answer says (X-Resume, in the header or the stream's trailer).
func (p *Proxy) observeResume(w http.ResponseWriter) {
	switch v := w.Header().Get(HeaderResume); {
	case v == "resumed":
		p.Metrics.ObserveResume(metrics.ResumeResumed)
	case strings.HasPrefix(v, "incomplete"):
		p.Metrics.ObserveResume(metrics.ResumeIncomplete)
	}
}
