package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/policyrouter/policyrouter/routing"
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
	// HeaderWeightVersions names the weight versions of a resumed
	// answer's output tokens: "version:start-end,...".
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
	dispatched    int64           // the router's version of the policy
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
func (p *Proxy) resumeFor(w http.ResponseWriter, r *http.Request, body []byte, valid bool) (*resumeState, error) {
	if !p.Resume || (r.URL.Path != "/generate" && r.URL.Path != "/v1/completions") {
		return nil, nil
	}
	switch v := headerValue(r.Header, canonicalResumeOnAbort); v {
	case "", "1":
	case "0":
		return nil, nil
	default:
		return nil, fieldError(HeaderResumeOnAbort, "must be 0 or 1, not "+strconv.Quote(v))
	}
	rs, why := parseFor(r.URL.Path, body, valid)
	if why != "" {
		w.Header().Set(HeaderResume, "unavailable ("+why+")")
		return nil, nil
	}
	rs.body, rs.left = body, p.Retries
	if rs.stream != nil {
		rs.stream.forms = p.StreamForms
	}
	return rs, nil
}

// parseFor reads a resumable request of the proxied path (valid:
// json.Valid(body)); it returns why the request cannot be resumed, or its
// state.
func parseFor(path string, body []byte, valid bool) (*resumeState, string) {
	if path == "/v1/completions" {
		return parseResumableCompletion(body, valid)
	}
	return parseResumable(body, valid)
}

// parseResumable reads a GenerateReqInput; it returns why the request
// cannot be resumed, or its state. A body the engine will refuse is not
// resumable either: the engine's answer says why.
//
// It answers as parseResumableJSON does, without decoding the whole body
// (which costs several times more than the rest of a proxied request's
// reading): it scans the top-level keys, matched by bytes as a map
// decode matches them (the last one winning), and decodes only the
// sampling_params; the request is decoded whole when an abort needs a
// continuation. Keys it cannot read by bytes go to encoding/json.
func parseResumable(body []byte, valid bool) (*resumeState, string) {
	if i := skipSpace(body, 0); !valid || i == len(body) || body[i] != '{' {
		return nil, "not a JSON object"
	}
	var stream, ids, text, sampling []byte
	ok := scanTopLevel(body, func(key, val []byte) {
		switch string(key) {
		case "stream":
			stream = val
		case "input_ids":
			ids = val
		case "text":
			text = val
		case "sampling_params":
			sampling = val
		}
	})
	if !ok {
		return parseResumableJSON(body)
	}
	rs := &resumeState{raw: body}
	if string(stream) == "true" {
		rs.stream = &streamState{prompt: make(map[string]json.RawMessage)}
	}
	if isNull(ids) {
		return nil, withoutIDs(text)
	}
	var tokens bool
	if rs.prompt, tokens = tokenIDs(ids); !tokens && json.Unmarshal(ids, &rs.prompt) != nil {
		return nil, "batch request"
	}
	return rs.samplingScan(sampling)
}

// parseResumableJSON is parseResumable by encoding/json alone.
func parseResumableJSON(body []byte) (*resumeState, string) {
	rs := &resumeState{}
	if json.Unmarshal(body, &rs.req) != nil || rs.req == nil {
		return nil, "not a JSON object"
	}
	var stream bool
	if raw, ok := rs.req["stream"]; ok && json.Unmarshal(raw, &stream) == nil && stream {
		rs.stream = &streamState{prompt: make(map[string]json.RawMessage)}
	}
	ids := rs.req["input_ids"]
	switch {
	case isNull(ids):
		return nil, withoutIDs(rs.req["text"])
	case json.Unmarshal(ids, &rs.prompt) != nil:
		return nil, "batch request"
	}
	return rs.samplingParams(rs.req["sampling_params"])
}

// withoutIDs is why a request without input_ids cannot be resumed, its
// text field text (nil when absent).
func withoutIDs(text []byte) string {
	if !isNull(text) {
		return "text prompt"
	}
	return "no input_ids"
}

// samplingParams reads a resumable request's sampling_params (raw, nil
// when absent) into rs.
func (rs *resumeState) samplingParams(raw []byte) (*resumeState, string) {
	if raw != nil && !isNull(raw) {
		if json.Unmarshal(raw, &rs.sampling) != nil {
			return nil, "batch request"
		}
	}
	var p struct {
		MaxNewTokens *int            `json:"max_new_tokens"`
		MinNewTokens int             `json:"min_new_tokens"`
		N            int             `json:"n"`
		JSONSchema   json.RawMessage `json:"json_schema"`
		Regex        json.RawMessage `json:"regex"`
		EBNF         json.RawMessage `json:"ebnf"`
		StructTag    json.RawMessage `json:"structural_tag"`
	}
	if raw != nil && !isNull(raw) && json.Unmarshal(raw, &p) != nil {
		return nil, "sampling_params not understood"
	}
	if p.N > 1 {
		return nil, "n > 1"
	}
	for _, g := range []json.RawMessage{p.JSONSchema, p.Regex, p.EBNF, p.StructTag} {
		if len(g) > 0 && !isNull(g) {
			return nil, "constrained decoding"
		}
	}
	rs.minNew = p.MinNewTokens
	rs.maxNew = tokenBudget(rs.sampling["max_new_tokens"], p.MaxNewTokens, sglangDefaultMaxNewTokens)
	return rs, ""
}

// samplingScan is samplingParams by the top-level keys of raw (a valid
// JSON value, nil when absent), matched and read as samplingParams'
// decodes do: the struct's fields without regard to case, the map's
// "max_new_tokens" by bytes, the last one winning. The map itself is
// decoded when a continuation is built. Keys it cannot read by bytes go
// to samplingParams.
func (rs *resumeState) samplingScan(raw []byte) (*resumeState, string) {
	if raw == nil || isNull(raw) {
		rs.maxNew = tokenBudget(nil, nil, sglangDefaultMaxNewTokens)
		return rs, ""
	}
	if raw[0] != '{' {
		return nil, "batch request"
	}
	var (
		exactMax  []byte // the map's "max_new_tokens"
		maxNew    *int
		minNew, n int
		grammar   [4][]byte // json_schema, regex, ebnf, structural_tag
		typeError bool
	)
	ok := scanTopLevel(raw, func(key, val []byte) {
		if string(key) == "max_new_tokens" {
			exactMax = val
		}
		switch {
		case bytes.EqualFold(key, []byte("max_new_tokens")):
			if maxNew = nil; string(val) != "null" {
				maxNew = new(int)
				typeError = !intValue(maxNew, val) || typeError
			}
		case bytes.EqualFold(key, []byte("min_new_tokens")):
			typeError = !intValue(&minNew, val) || typeError
		case bytes.EqualFold(key, []byte("n")):
			typeError = !intValue(&n, val) || typeError
		default:
			for i, name := range []string{"json_schema", "regex", "ebnf", "structural_tag"} {
				if bytes.EqualFold(key, []byte(name)) {
					grammar[i] = val
				}
			}
		}
	})
	switch {
	case !ok:
		return rs.samplingParams(raw)
	case typeError:
		return nil, "sampling_params not understood"
	case n > 1:
		return nil, "n > 1"
	}
	for _, g := range grammar {
		if g != nil && !isNull(g) {
			return nil, "constrained decoding"
		}
	}
	rs.minNew = minNew
	rs.maxNew = tokenBudget(exactMax, maxNew, sglangDefaultMaxNewTokens)
	return rs, ""
}

// intValue decodes the JSON value val into *v as json.Unmarshal does,
// null leaving it as it was; false when val is not an int.
func intValue(v *int, val []byte) bool {
	if string(val) == "null" {
		return true
	}
	if val[0] != '-' && (val[0] < '0' || val[0] > '9') {
		return false
	}
	i, err := strconv.ParseInt(string(val), 10, strconv.IntSize)
	if err != nil {
		return false
	}
	*v = int(i)
	return true
}

// tokenIDs decodes raw, a valid JSON value, as json.Unmarshal into
// []int64 would when it is an array of integer literals that fit (ok);
// anything else (null elements, fractions, exponents, long numbers, not
// an array) is left to encoding/json.
func tokenIDs(raw []byte) (ids []int64, ok bool) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	ids = make([]int64, 0, bytes.Count(raw, []byte(","))+1)
	i := skipSpace(raw, 1)
	if raw[i] == ']' {
		return ids, true
	}
	for {
		neg := raw[i] == '-'
		if neg {
			i++
		}
		start := i
		var n int64
		for ; i < len(raw) && raw[i] >= '0' && raw[i] <= '9'; i++ {
			n = n*10 + int64(raw[i]-'0')
		}
		if i == start || i-start > 18 {
			return nil, false
		}
		if neg {
			n = -n
		}
		ids = append(ids, n)
		switch i = skipSpace(raw, i); raw[i] {
		case ',':
			i = skipSpace(raw, i+1)
		case ']':
			return ids, true
		default:
			return nil, false
		}
	}
}

// tokenBudget is a request's bound on new tokens, its field raw (nil
// when absent) decoded as parsed: the engine's default def when the
// field is absent, nil (no bound) when it is null.
func tokenBudget(raw json.RawMessage, parsed *int, def int) *int {
	switch {
	case raw == nil:
		return &def
	case isNull(raw):
		return nil
	}
	return parsed
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
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
	if st := rs.stream; st.started && (len(rs.segs) > 1 || st.why != "") {
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

// resumeAnswer is ModifyResponse for a resumable request: it reads the
// policy's answer, and either lets it through (not aborted, the common
// case, unchanged), or records its tokens and ends the attempt for a
// continuation (errResume), or replaces it with the answer merged from
// every segment.
func (rs *resumeState) resumeAnswer(res *http.Response, a *attempt) error {
	if res.StatusCode != http.StatusOK || (res.Header.Get("Content-Encoding") != "" && res.Header.Get("Content-Encoding") != "identity") {
		if len(rs.segs) > 0 {
			res.Header.Set(HeaderResume, "incomplete (the continuation was answered "+strconv.Itoa(res.StatusCode)+"; the tokens before it are lost)")
		}
		return nil
	}
	raw, err := io.ReadAll(io.LimitReader(res.Body, resumeMaxAnswer+1))
	if err != nil {
		res.Body.Close()
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err // the client left, or --proxy-timeout: ErrorHandler answers
		}
		// The policy died mid-answer, with what it generated: it may
		// have run the request, so it goes nowhere else. A first attempt
		// is a 502 like any other; a continuation's tokens before it stand.
		a.failed, a.reason = true, "failed mid-answer: "+err.Error()
		if len(rs.segs) == 0 {
			return err
		}
		out := rs.merged()
		if rs.completion != nil {
			out = rs.mergedCompletion()
		}
		rs.answerWith(res, out, "the continuation "+a.reason)
		return nil
	}
	if len(raw) > resumeMaxAnswer {
		// Passed on as it is: over once the copy reaches its end.
		res.Body = &upstreamBody{ReadCloser: struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(raw), res.Body), res.Body}, a: a}
		return nil
	}
	res.Body.Close()
	a.over = true // read to its end
	pass := func() error {
		res.Body = io.NopCloser(bytes.NewReader(raw))
		return nil
	}
	if len(rs.segs) == 0 && !bytes.Contains(raw, []byte(`"abort"`)) {
		return pass() // not aborted: no decoding, no copy
	}
	if rs.completion != nil {
		return rs.completionAnswer(res, a, raw, pass)
	}
	var ans map[string]json.RawMessage
	var meta map[string]json.RawMessage
	if json.Unmarshal(raw, &ans) != nil || json.Unmarshal(ans["meta_info"], &meta) != nil {
		return pass()
	}
	var finish struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(meta["finish_reason"], &finish)
	aborted := finish.Type == "abort"
	if !aborted && len(rs.segs) == 0 {
		return pass()
	}
	ids, ok := outputIDs(ans, meta)
	if !ok {
		why := "unavailable (answer without output_ids)"
		if len(rs.segs) > 0 {
			why = "incomplete (the continuation's answer has no output_ids; the tokens before it are lost)"
		}
		res.Header.Set(HeaderResume, why)
		return pass()
	}
	rs.add(a.d, ans, meta, ids)
	if aborted && rs.remaining() > 0 && rs.left > 0 {
		rs.body, rs.abortedOn = rs.continuation(), a.d.Policy.ID
		return errResume
	}
	why := ""
	switch {
	case aborted && rs.remaining() <= 0:
		// Aborted with nothing left to generate: it ended by length.
		rs.meta["finish_reason"], _ = json.Marshal(map[string]any{"type": "length", "length": len(rs.ids)})
	case aborted:
		why = "--proxy-retries exhausted"
	}
	rs.answerWith(res, rs.merged(), why)
	return nil
}

// answerWith makes out the body of res, the client's one answer, with
// the resume headers (why: what kept it incomplete, or "").
func (rs *resumeState) answerWith(res *http.Response, out []byte, why string) {
	res.Body = io.NopCloser(bytes.NewReader(out))
	res.ContentLength = int64(len(out))
	res.Header.Set("Content-Length", strconv.Itoa(len(out)))
	rs.setHeaders(res.Header, why)
}

// outputIDs are an answer's output tokens: output_ids, or the token ids
// of output_token_logprobs (what slime reads).
func outputIDs(ans, meta map[string]json.RawMessage) ([]int64, bool) {
	var ids []int64
	if raw, ok := ans["output_ids"]; ok && json.Unmarshal(raw, &ids) == nil && ids != nil {
		return ids, true
	}
	var lps [][]json.RawMessage
	if raw, ok := meta["output_token_logprobs"]; !ok || json.Unmarshal(raw, &lps) != nil {
		return nil, false
	}
	ids = make([]int64, len(lps))
	for i, lp := range lps {
		if len(lp) < 2 || json.Unmarshal(lp[1], &ids[i]) != nil {
			return nil, false
		}
	}
	return ids, true
}

// add records one segment's answer.
func (rs *resumeState) add(d routing.Decision, ans, meta map[string]json.RawMessage, ids []int64) {
	rs.addSegment(d, meta["weight_version"], meta["weight_versions"], meta["finish_reason"], len(rs.ids), len(ids))
	rs.ids = append(rs.ids, ids...)
	var text string
	if json.Unmarshal(ans["text"], &text) != nil {
		rs.noText = true
	}
	rs.text.WriteString(text)
	if len(rs.segs) == 1 {
		rs.first = meta
		rs.lists = make(map[string][]json.RawMessage)
		for _, k := range concatMeta {
			if _, ok := meta[k]; ok {
				rs.lists[k] = []json.RawMessage{}
			}
		}
	}
	for k, l := range rs.lists {
		var items []json.RawMessage
		if json.Unmarshal(meta[k], &items) != nil {
			delete(rs.lists, k)
			continue
		}
		rs.lists[k] = append(l, items...)
	}
	var cached int64
	_ = json.Unmarshal(meta["cached_tokens"], &cached)
	rs.cached += cached
	rs.last, rs.meta = ans, meta
}

// addSegment records that d's policy generated the n output tokens from
// start: its meta_info's weight_version, weight_versions and finish_reason
// name their version and how the segment ended.
func (rs *resumeState) addSegment(d routing.Decision, weightVersion, weightVersions, finish json.RawMessage, start, n int) {
	version := strconv.FormatInt(d.Version, 10)
	_ = json.Unmarshal(weightVersion, &version)
	rs.segs = append(rs.segs, resumeSegment{PolicyID: d.Policy.ID, PolicyIndex: d.Policy.Index, WeightVersion: version,
		Start: start, End: start + n, FinishReason: finish, dispatched: d.Version})
	var own []weightSpan
	if json.Unmarshal(weightVersions, &own) != nil || len(own) == 0 {
		own = []weightSpan{{Version: version, Start: 0, End: n}}
	}
	for _, sp := range own {
		sp.Start, sp.End = sp.Start+start, sp.End+start
		if k := len(rs.spans); k > 0 && rs.spans[k-1].Version == sp.Version && rs.spans[k-1].End == sp.Start {
			rs.spans[k-1].End = sp.End
			continue
		}
		if sp.End > sp.Start || len(rs.spans) == 0 {
			rs.spans = append(rs.spans, sp)
		}
	}
}

// remaining is how many tokens the request may still generate.
func (rs *resumeState) remaining() int {
	if rs.maxNew == nil {
		return 1 << 30
	}
	return *rs.maxNew - len(rs.ids)
}

// continuation is the request that goes on from the tokens so far:
// input_ids + them, max_new_tokens (and min_new_tokens) reduced by their
// number, as slime's partial rollout sends it; the prompt's logprobs are
// the first segment's, so logprob_start_len is dropped.
func (rs *resumeState) continuation() []byte {
	if rs.req == nil { // parseResumable read a JSON object by its keys
		_ = json.Unmarshal(rs.raw, &rs.req)
		_ = json.Unmarshal(rs.req["sampling_params"], &rs.sampling)
	}
	req := make(map[string]json.RawMessage, len(rs.req))
	for k, v := range rs.req {
		req[k] = v
	}
	req["input_ids"], _ = json.Marshal(append(slices.Clip(rs.prompt), rs.ids...))
	sp := make(map[string]json.RawMessage, len(rs.sampling)+1)
	for k, v := range rs.sampling {
		sp[k] = v
	}
	if rs.maxNew != nil {
		sp["max_new_tokens"], _ = json.Marshal(rs.remaining())
	}
	if rs.minNew > 0 {
		sp["min_new_tokens"], _ = json.Marshal(max(rs.minNew-len(rs.ids), 0))
	}
	req["sampling_params"], _ = json.Marshal(sp)
	delete(req, "logprob_start_len")
	b, _ := json.Marshal(req)
	return b
}

// merged is the one answer of every segment: the last answer's fields,
// with the output tokens, text, output logprob lists and token counts of
// all, the first's prompt figures, the last's finish_reason, and the
// segments and weight-version spans in meta_info.
func (rs *resumeState) merged() []byte {
	out := make(map[string]json.RawMessage, len(rs.last))
	for k, v := range rs.last {
		out[k] = v
	}
	meta := make(map[string]json.RawMessage, len(rs.meta)+4)
	for k, v := range rs.meta {
		meta[k] = v
	}
	out["output_ids"], _ = json.Marshal(rs.ids)
	if !rs.noText {
		out["text"], _ = json.Marshal(rs.text.String())
	}
	for _, k := range []string{"prompt_tokens", "input_token_logprobs", "input_top_logprobs", "input_token_ids_logprobs"} {
		if v, ok := rs.first[k]; ok {
			meta[k] = v
		} else {
			delete(meta, k)
		}
	}
	for _, k := range concatMeta {
		if l, ok := rs.lists[k]; ok {
			meta[k], _ = json.Marshal(l)
		} else {
			delete(meta, k)
		}
	}
	if _, ok := meta["output_token_logprobs_length"]; ok {
		meta["output_token_logprobs_length"], _ = json.Marshal(len(rs.lists["output_token_logprobs"]))
	}
	meta["completion_tokens"], _ = json.Marshal(len(rs.ids))
	if _, ok := meta["cached_tokens"]; ok {
		meta["cached_tokens"], _ = json.Marshal(rs.cached)
	}
	meta["weight_versions"], _ = json.Marshal(rs.spans)
	meta["segments"], _ = json.Marshal(rs.segs)
	out["meta_info"], _ = json.Marshal(meta)
	b, _ := json.Marshal(out)
	return b
}

// setHeaders names the segments' weight versions and what became of
// resuming (why: why the answer ends aborted, if it does).
func (rs *resumeState) setHeaders(h http.Header, why string) {
	var b strings.Builder
	for i, sp := range rs.spans {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(sp.Version + ":" + strconv.Itoa(sp.Start) + "-" + strconv.Itoa(sp.End))
	}
	h.Set(HeaderWeightVersions, b.String())
	switch {
	case why != "":
		h.Set(HeaderResume, "incomplete ("+why+")")
	case len(rs.segs) > 1:
		h.Set(HeaderResume, "resumed")
	}
}

// writePartial answers with the segments so far, ending aborted, when no
// further policy could continue them.
func (rs *resumeState) writePartial(w http.ResponseWriter, why string) {
	last := rs.segs[len(rs.segs)-1]
	out := rs.merged()
	if rs.completion != nil {
		out = rs.mergedCompletion()
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set(HeaderPolicyIndex, strconv.Itoa(last.PolicyIndex))
	h.Set(HeaderPolicyID, last.PolicyID)
	h.Set(HeaderWeightVersion, strconv.FormatInt(last.dispatched, 10))
	rs.setHeaders(h, why)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}
