package proxy

import (
	"encoding/json"
	"net/http"
	"slices"
)

// promptKeys are the meta_info fields of the prompt, taken from the first
// policy's chunks: a continuation's prompt holds the tokens before it.
var promptKeys = []string{"prompt_tokens", "input_token_logprobs", "input_top_logprobs", "input_token_ids_logprobs"}

// sglangChunk is what the proxy reads of a streamed chunk.
type sglangChunk struct {
	Text      *string         `json:"text"`
	OutputIDs []int64         `json:"output_ids"`
	Error     json.RawMessage `json:"error"`
	Meta      struct {
		CompletionTokens      *int              `json:"completion_tokens"`
		FinishReason          json.RawMessage   `json:"finish_reason"`
		WeightVersion         json.RawMessage   `json:"weight_version"`
		WeightVersions        json.RawMessage   `json:"weight_versions"`
		CachedTokens          int64             `json:"cached_tokens"`
		TokenLogprobs         []json.RawMessage `json:"output_token_logprobs"`
		TopLogprobs           []json.RawMessage `json:"output_top_logprobs"`
		TokenIDsLogprobs      []json.RawMessage `json:"output_token_ids_logprobs"`
		PromptTokens          json.RawMessage   `json:"prompt_tokens"`
		InputTokenLogprobs    json.RawMessage   `json:"input_token_logprobs"`
		InputTopLogprobs      json.RawMessage   `json:"input_top_logprobs"`
		InputTokenIDsLogprobs json.RawMessage   `json:"input_token_ids_logprobs"`
	} `json:"meta_info"`
}

// lists are the chunk's output logprob lists by key (concatMeta), nil
// when absent.
func (c *sglangChunk) lists() [3][]json.RawMessage {
	return [3][]json.RawMessage{c.Meta.TokenLogprobs, c.Meta.TopLogprobs, c.Meta.TokenIDsLogprobs}
}

// ids are the chunk's output tokens: output_ids, or the token ids of
// output_token_logprobs.
func (c *sglangChunk) ids() ([]int64, bool) {
	if c.OutputIDs != nil {
		return c.OutputIDs, true
	}
	if c.Meta.TokenLogprobs == nil {
		return nil, false
	}
	return logprobIDs(c.Meta.TokenLogprobs)
}

// promptFields are the chunk's meta_info fields of promptKeys, in order,
// nil when absent.
func (c *sglangChunk) promptFields() [4]json.RawMessage {
	m := &c.Meta
	return [4]json.RawMessage{m.PromptTokens, m.InputTokenLogprobs, m.InputTopLogprobs, m.InputTokenIDsLogprobs}
}

// absorb adds a chunk's new tokens, text and logprobs to the answer,
// reading its form (cumulative or incremental) once it can tell; the
// policy's form known beforehand (streamState.knownForm) holds until
// then, and after unless completion_tokens says otherwise.
func (rs *resumeState) absorb(c *sglangChunk, ids []int64) {
	st := rs.stream
	seg := &st.seg
	if !seg.read && seg.marks.ids > 0 {
		// completion_tokens settles it, whatever the server's info said
		// (the server may have restarted with other flags since it was
		// read); without it the info stands, or the tokens decide.
		seg.read = true
		switch ct := c.Meta.CompletionTokens; {
		case ct != nil && *ct == len(ids):
			seg.form = chunksCumulative
		case ct != nil && *ct == seg.marks.ids+len(ids):
			seg.form = chunksIncremental
		case seg.form != chunksUnknown:
		case len(ids) >= seg.marks.ids && slices.Equal(ids[:seg.marks.ids], rs.ids[seg.start:]):
			seg.form = chunksCumulative
		default:
			seg.form = chunksIncremental
		}
		if len(rs.segs) == 0 {
			st.form = seg.form
		}
	}
	// fresh is where the new part of a chunk's list of n starts, mark
	// being what the segment's chunks held before; it moves mark on.
	fresh := func(mark *int, n int) int {
		if seg.form != chunksCumulative {
			*mark += n
			return 0
		}
		from := min(*mark, n)
		*mark = n
		return from
	}
	have := seg.marks.ids
	rs.ids = append(rs.ids, ids[fresh(&have, len(ids)):]...)
	seg.marks.ids = len(rs.ids) - seg.start
	if c.Text == nil {
		rs.noText = true
	} else {
		rs.text.WriteString((*c.Text)[fresh(&seg.marks.text, len(*c.Text)):])
	}
	if st.lists == nil {
		st.lists = make(map[string][]json.RawMessage)
	}
	for i, l := range c.lists() {
		if l == nil {
			continue
		}
		k := concatMeta[i]
		n := seg.marks.lists[k]
		st.lists[k] = append(st.lists[k], l[fresh(&n, len(l)):]...)
		seg.marks.lists[k] = n
	}
	if c.Meta.WeightVersion != nil {
		seg.version = append(seg.version[:0], c.Meta.WeightVersion...)
	}
	if c.Meta.WeightVersions != nil {
		seg.versions = append(seg.versions[:0], c.Meta.WeightVersions...)
	}
	seg.cached = c.Meta.CachedTokens
}

// endSegment records the current policy's part of the stream; finish is
// its finish_reason, nil when it died.
func (rs *resumeState) endSegment(finish json.RawMessage) {
	seg := &rs.stream.seg
	if finish == nil {
		finish = json.RawMessage(`null`)
	}
	rs.addSegment(seg.d, seg.version, seg.versions, finish, seg.start, len(rs.ids)-seg.start)
	rs.cached += seg.cached
	seg.cached = 0
}

// marks are the lengths of the answer so far.
func (rs *resumeState) marks() sentMarks {
	m := sentMarks{ids: len(rs.ids), text: rs.text.Len(), lists: make(map[string]int, len(rs.stream.lists))}
	for k, l := range rs.stream.lists {
		m.lists[k] = len(l)
	}
	return m
}

// chunkEvent is a chunk of the policy's (data) rewritten into the client's
// stream: the answer so far in the client's form, the first policy's
// prompt figures, counts from the first token, finish (when not nil) for
// its finish_reason, and, when last, the segments.
func (rs *resumeState) chunkEvent(data, finish json.RawMessage, last bool) []byte {
	st := rs.stream
	var out, meta map[string]json.RawMessage
	if json.Unmarshal(data, &out) != nil || json.Unmarshal(out["meta_info"], &meta) != nil || meta == nil {
		out, meta = map[string]json.RawMessage{}, map[string]json.RawMessage{}
	}
	if st.form == chunksUnknown {
		st.form = chunksCumulative // SGLang's default
	}
	var since sentMarks
	if st.form == chunksIncremental {
		since = st.sent
	}
	out["output_ids"], _ = json.Marshal(rs.ids[since.ids:])
	if !rs.noText {
		out["text"], _ = json.Marshal(rs.text.String()[since.text:])
	}
	for _, k := range concatMeta {
		if l, ok := st.lists[k]; ok {
			meta[k], _ = json.Marshal(l[since.lists[k]:])
		}
	}
	for _, k := range promptKeys {
		if v, ok := st.prompt[k]; ok {
			meta[k] = v
		}
	}
	if finish != nil {
		meta["finish_reason"] = finish
	}
	rs.countMeta(meta, len(st.lists["output_token_logprobs"]), rs.cached+st.seg.cached, last)
	out["meta_info"], _ = json.Marshal(meta)
	st.sent = rs.marks()
	b, _ := json.Marshal(out)
	return append(append([]byte("data: "), b...), "\n\n"...)
}

// lastEvent ends the client's stream when no policy goes on with it: the
// held-back aborted chunk, or the last chunk with an abort saying why,
// then [DONE]; an error event when no chunk came at all.
func (rs *resumeState) lastEvent(why string) []byte {
	st := rs.stream
	st.why, st.ended = why, true
	base, finish := st.pending, json.RawMessage(nil)
	if base == nil {
		base = st.last
		finish, _ = json.Marshal(map[string]any{"type": "abort", "message": why, "status_code": nil, "err_type": nil})
	}
	if base == nil {
		return errorEvent(why)
	}
	return append(rs.chunkEvent(base, finish, true), "data: [DONE]\n\n"...)
}

// endStream ends the client's stream from outside an attempt.
func (rs *resumeState) endStream(w http.ResponseWriter, why string) {
	rs.stream.done = true
	_, _ = w.Write(rs.lastEvent(why))
	_ = http.NewResponseController(w).Flush()
}
