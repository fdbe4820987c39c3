package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/policyrouter/policyrouter/routing"
)

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
		rs.answerWith(res, rs.merged(), "the continuation "+a.reason)
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
	a.noteUsage(raw)
	pass := func() error {
		res.Body = io.NopCloser(bytes.NewReader(raw))
		return nil
	}
	if len(rs.segs) == 0 && !bytes.Contains(raw, []byte(`"abort"`)) {
		if a.prompt != nil && rs.completion == nil {
			a.noteOutput(rs.prompt, topLevelIDs(raw, "output_ids"))
		}
		return pass() // not aborted: no decoding, no copy
	}
	add := rs.addAnswer
	if rs.completion != nil {
		add = rs.addCompletion
	}
	aborted, ok := add(res, a.d, raw)
	if !ok {
		return pass()
	}
	if aborted && rs.remaining() > 0 && rs.left > 0 {
		rs.body, rs.abortedOn = rs.continuation(), a.d.Policy.ID
		return errResume
	}
	why := ""
	switch {
	case aborted && rs.remaining() <= 0 && rs.completion != nil:
		rs.completion.choice["finish_reason"] = json.RawMessage(`"length"`)
	case aborted && rs.remaining() <= 0:
		// Aborted with nothing left to generate: it ended by length.
		rs.meta["finish_reason"], _ = json.Marshal(map[string]any{"type": "length", "length": len(rs.ids)})
	case aborted:
		why = "--proxy-retries exhausted"
	}
	rs.answerWith(res, rs.merged(), why)
	return nil
}

// noIDs says in res's X-Resume why an answer without the token ids of
// its output (field) passes through as it is.
func (rs *resumeState) noIDs(res *http.Response, field string) {
	why := "unavailable (answer without " + field + ")"
	if len(rs.segs) > 0 {
		why = "incomplete (the continuation's answer has no " + field + "; the tokens before it are lost)"
	}
	res.Header.Set(HeaderResume, why)
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
	var lps []json.RawMessage
	if raw, ok := meta["output_token_logprobs"]; !ok || json.Unmarshal(raw, &lps) != nil {
		return nil, false
	}
	return logprobIDs(lps)
}

// logprobIDs are the token ids of output_token_logprobs, [logprob,
// token_id, text] triples.
func logprobIDs(lps []json.RawMessage) ([]int64, bool) {
	ids := make([]int64, len(lps))
	for i, raw := range lps {
		var lp []json.RawMessage
		if json.Unmarshal(raw, &lp) != nil || len(lp) < 2 || json.Unmarshal(lp[1], &ids[i]) != nil {
			return nil, false
		}
	}
	return ids, true
}

// addAnswer records a /generate answer (raw) as a segment when it is
// one to resume: aborted, or a continuation's. ok is false when it
// passes through as it is instead.
func (rs *resumeState) addAnswer(res *http.Response, d routing.Decision, raw []byte) (aborted, ok bool) {
	var ans, meta map[string]json.RawMessage
	if json.Unmarshal(raw, &ans) != nil || json.Unmarshal(ans["meta_info"], &meta) != nil {
		return false, false
	}
	var finish struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(meta["finish_reason"], &finish)
	aborted = finish.Type == "abort"
	if !aborted && len(rs.segs) == 0 {
		return false, false
	}
	ids, ok := outputIDs(ans, meta)
	if !ok {
		rs.noIDs(res, "output_ids")
		return false, false
	}
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
	return aborted, true
}

// addSegment records that d's policy generated the n output tokens from
// start: its meta_info's weight_version, weight_versions and finish_reason
// name their version and how the segment ended.
func (rs *resumeState) addSegment(d routing.Decision, weightVersion, weightVersions, finish json.RawMessage, start, n int) {
	version := weightLabel(d)
	_ = json.Unmarshal(weightVersion, &version)
	rs.segs = append(rs.segs, resumeSegment{PolicyID: d.Policy.ID, PolicyIndex: d.Policy.Index, WeightVersion: version,
		Start: start, End: start + n, FinishReason: finish, RouterVersion: d.Version})
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
	if rs.completion != nil {
		return rs.completionContinuation()
	}
	if rs.req == nil { // parseResumable read a JSON object by its keys
		_ = json.Unmarshal(rs.raw, &rs.req)
		_ = json.Unmarshal(rs.req["sampling_params"], &rs.sampling)
	}
	req, sp := clone(rs.req, 0), clone(rs.sampling, 1)
	req["input_ids"], _ = json.Marshal(append(slices.Clip(rs.prompt), rs.ids...))
	rs.setBounds(sp, "max_new_tokens", "min_new_tokens")
	req["sampling_params"], _ = json.Marshal(sp)
	delete(req, "logprob_start_len")
	b, _ := json.Marshal(req)
	return b
}

// setBounds sets in m, under the keys maxKey and minKey, what is left of
// the request's bounds on new tokens after the tokens so far.
func (rs *resumeState) setBounds(m map[string]json.RawMessage, maxKey, minKey string) {
	if rs.maxNew != nil {
		m[maxKey], _ = json.Marshal(rs.remaining())
	}
	if rs.minNew > 0 {
		m[minKey], _ = json.Marshal(max(rs.minNew-len(rs.ids), 0))
	}
}

// clone is a copy of m to write to, with room for n more keys.
func clone(m map[string]json.RawMessage, n int) map[string]json.RawMessage {
	c := make(map[string]json.RawMessage, len(m)+n)
	maps.Copy(c, m)
	return c
}

// merged is the one answer of every segment: the last answer's fields,
// with the output tokens, text, output logprob lists and token counts of
// all, the first's prompt figures, the last's finish_reason, and the
// segments and weight-version spans in meta_info.
func (rs *resumeState) merged() []byte {
	if rs.completion != nil {
		return rs.mergedCompletion()
	}
	out, meta := clone(rs.last, 0), clone(rs.meta, 4)
	out["output_ids"], _ = json.Marshal(rs.ids)
	if !rs.noText {
		out["text"], _ = json.Marshal(rs.text.String())
	}
	for _, k := range promptKeys {
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
	rs.countMeta(meta, len(rs.lists["output_token_logprobs"]), rs.cached, true)
	out["meta_info"], _ = json.Marshal(meta)
	b, _ := json.Marshal(out)
	return b
}

// countMeta sets in meta the answer's counts so far: completion_tokens,
// and output_token_logprobs_length (logprobs) and cached_tokens (cached)
// where meta has them; and when last, the client's finish_reason, the
// weight-version spans and the segments.
func (rs *resumeState) countMeta(meta map[string]json.RawMessage, logprobs int, cached int64, last bool) {
	if _, ok := meta["output_token_logprobs_length"]; ok {
		meta["output_token_logprobs_length"], _ = json.Marshal(logprobs)
	}
	meta["completion_tokens"], _ = json.Marshal(len(rs.ids))
	if _, ok := meta["cached_tokens"]; ok {
		meta["cached_tokens"], _ = json.Marshal(cached)
	}
	if last {
		meta["finish_reason"] = rs.clientFinish(meta["finish_reason"])
		meta["weight_versions"], _ = json.Marshal(rs.spans)
		meta["segments"], _ = json.Marshal(rs.segs)
	}
}

// weightLabel is the label of d's weight version in X-Weight-Versions and
// segments: the engine's own (SGLang's weight_version), else the router's
// integer version.
func weightLabel(d routing.Decision) string {
	if d.WeightLabel != "" {
		return d.WeightLabel
	}
	return strconv.FormatInt(d.Version, 10)
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
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set(HeaderPolicyIndex, strconv.Itoa(last.PolicyIndex))
	h.Set(HeaderPolicyID, last.PolicyID)
	h.Set(HeaderWeightVersion, strconv.FormatInt(last.RouterVersion, 10))
	rs.setHeaders(h, why)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

// clientFinish is a resumed answer's finish_reason as the client's request
// has it: SGLang's FINISH_LENGTH names the budget that ended the
// generation ({"type": "length", "length": max_new_tokens}), and the last
// segment's was what was left of the client's, not the client's.
func (rs *resumeState) clientFinish(finish json.RawMessage) json.RawMessage {
	if len(rs.segs) < 2 || rs.maxNew == nil {
		return finish
	}
	var f map[string]json.RawMessage
	if json.Unmarshal(finish, &f) != nil || string(f["type"]) != `"length"` {
		return finish
	}
	f["length"], _ = json.Marshal(*rs.maxNew)
	b, _ := json.Marshal(f)
	return b
}
