package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/policyrouter/policyrouter/routing"
)

// Resuming a streamed /generate. The client's stream goes on, from the
// policy that aborted it (or died) to the next, as one stream in SGLang's
// own format, which is (sgl-project/sglang):
//
//   - http_server.py generate_request (commit 0025436eab05): one
//     "data: <json>\n\n" event per output chunk, then "data: [DONE]\n\n";
//     an error ends it with "data: {"error": {"message"}}" before [DONE];
//   - each chunk is {"text", "output_ids", "meta_info"}, built by
//     tokenizer_manager_components/output_processor.py _build_out_dict_str
//     (commit 29ff63a5fbf7): by default text, output_ids and the output
//     logprob lists hold every token so far (cumulative); with
//     --incremental-streaming-output they hold only the chunk's new tokens
//     (logprob_ops.py slice_streaming_output_meta_info, commit
//     229224a3f405), while meta_info.completion_tokens and
//     output_token_logprobs_length count every token in both;
//   - an abort is the last chunk, its finish_reason {"type": "abort"},
//     then [DONE] (response_emitter.py _handle_abort_finish_reason, commit
//     5bf23cf6bf99, yields it to a stream whatever its status_code).
//
// Chunks of the first policy reach the client as the engine sent them.
// Which of the two forms a policy's chunks have is read from the chunks
// themselves: after a chunk with tokens, the next one's output_ids are as
// many as completion_tokens (cumulative) or as many as the new tokens
// (incremental). Until they show it, and when completion_tokens is
// missing, the form is what Config.StreamForms says of the policy, when it
// knows (the poller reads incremental_streaming_output from each SGLang
// server's info). So a stream aborted before its second chunk with tokens
// is continued in the form its engine's info says; without the info, its
// client is sent SGLang's default, cumulative chunks. Each continuation's
// chunks are rewritten to follow on: in the client's form, output_ids,
// text and the output logprob lists extended by (or cut to) what the
// client has not had yet, completion_tokens and
// output_token_logprobs_length counting from the first token, the
// prompt's figures the first policy's. The aborted chunk itself is held
// back: its tokens reach the client in the continuation's first chunk, or
// in a last chunk that ends the stream aborted when no policy can go on.
// The last chunk of a resumed stream carries meta_info.segments and
// weight_versions, as a resumed answer does; X-Resume and
// X-Weight-Versions, which cannot be known when the stream starts, come as
// HTTP trailers (announced in the Trailer header).

// Forms of a stream's chunks.
const (
	chunksUnknown     = iota
	chunksCumulative  // every token so far: SGLang's default
	chunksIncremental // the new tokens only
)

// streamState is what resuming a stream adds to its resumeState.
type streamState struct {
	started bool // the client's header went out
	live    bool // the current attempt's stream is the client's
	done    bool // the client's stream has ended
	ended   bool // its last chunk went out: [DONE] follows
	why     string

	forms   StreamForms                // the policies' forms, when known (Config.StreamForms)
	form    int                        // the client's form of chunks
	sent    sentMarks                  // what the client has had, for incremental chunks
	prompt  map[string]json.RawMessage // the first policy's prompt figures
	pending []byte                     // the aborted chunk held back
	last    []byte                     // the last chunk of the current policy
	lists   map[string][]json.RawMessage
	seg     segmentStream
}

// sentMarks are lengths of output_ids, text and each output logprob list.
type sentMarks struct {
	ids, text int
	lists     map[string]int
}

// segmentStream is the current policy's part of a stream: its form and
// what its chunks held so far.
type segmentStream struct {
	d        routing.Decision
	form     int  // as known (Config.StreamForms) or read
	read     bool // its chunks have shown their form
	start    int  // its first token's position in the answer
	marks    sentMarks
	version  json.RawMessage
	versions json.RawMessage
	cached   int64
}

// resumeStream is ModifyResponse for a resumable stream. The first answer
// that streams becomes the client's stream; one that does not (an error,
// or an encoding the proxy cannot read) passes through as it is. A
// continuation that does not stream ends its attempt for another.
func (rs *resumeState) resumeStream(res *http.Response, a *attempt) error {
	st := rs.stream
	readable := res.StatusCode == http.StatusOK && isEventStream(res.Header) &&
		(res.Header.Get("Content-Encoding") == "" || res.Header.Get("Content-Encoding") == "identity")
	if !readable && !st.started {
		if res.StatusCode == http.StatusOK && isEventStream(res.Header) {
			res.Header.Set(HeaderResume, "unavailable (encoded stream)")
		}
		res.Body = &upstreamBody{ReadCloser: res.Body, a: a, stream: isEventStream(res.Header)}
		return nil
	}
	if !readable {
		res.Body.Close()
		a.over = true // an answer other than a stream: nothing runs on
		a.reason = "answered " + strconv.Itoa(res.StatusCode) + " " + res.Header.Get("Content-Type") + " to a continuation"
		return errResume
	}
	if !st.started {
		res.Header.Set("Trailer", HeaderResume+", "+HeaderWeightVersions)
		st.started = true
	}
	st.live = true
	st.seg = segmentStream{d: a.d, start: len(rs.ids), marks: sentMarks{lists: make(map[string]int)}, form: st.knownForm(a.d.Policy)}
	if len(rs.segs) == 0 {
		st.form = st.seg.form // the client's, unless unknown yet
	}
	st.last = nil
	res.Body = &streamBody{rc: res.Body, br: bufio.NewReader(res.Body), rs: rs, a: a}
	return nil
}

// knownForm is the form of p's chunks as Config.StreamForms knows it,
// chunksUnknown when it does not.
func (st *streamState) knownForm(p routing.Policy) int {
	if st.forms == nil {
		return chunksUnknown
	}
	switch incremental, known := st.forms.IncrementalStreaming(p); {
	case !known:
		return chunksUnknown
	case incremental:
		return chunksIncremental
	}
	return chunksCumulative
}

// continuationWriter is the client's ResponseWriter as an attempt after
// the first sees it: the header went out already, and the proxy's own
// error answers cannot go into the stream, so only the bytes of a
// continuation that streams reach the client.
type continuationWriter struct {
	w      http.ResponseWriter
	st     *streamState
	header http.Header
}

func (c *continuationWriter) Header() http.Header { return c.header }
func (c *continuationWriter) WriteHeader(int)     {}

func (c *continuationWriter) Write(b []byte) (int, error) {
	if !c.st.live {
		return len(b), nil
	}
	return c.w.Write(b)
}

// FlushError flushes the client's stream, for ReverseProxy.
func (c *continuationWriter) FlushError() error { return http.NewResponseController(c.w).Flush() }

// streamBody reads one policy's stream and gives ReverseProxy the
// client's: chunks passed, rewritten or held back. It ends (io.EOF) when
// the client's stream ends, or when the policy's part does and the
// attempt is to be continued on another (attempt.retry).
type streamBody struct {
	rc   io.ReadCloser
	br   *bufio.Reader
	rs   *resumeState
	a    *attempt
	line []byte
	out  []byte
	eof  bool
}

func (b *streamBody) Close() error { return b.rc.Close() }

func (b *streamBody) Read(p []byte) (int, error) {
	for len(b.out) == 0 {
		if b.eof {
			return 0, io.EOF
		}
		if err := b.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, b.out)
	b.out = b.out[n:]
	return n, nil
}

// next reads one event of the policy's stream and decides what the client
// gets of it. Its error is the client's leaving, which ends the copy.
func (b *streamBody) next() error {
	event, data, err := b.readEvent()
	st := b.rs.stream
	switch {
	case err != nil && errors.Is(err, context.Canceled):
		return err // the client left
	case err != nil && st.ended:
		b.eof, st.done, b.a.over = true, true, true // the last chunk came, [DONE] did not
		return nil
	case err != nil && errors.Is(err, context.DeadlineExceeded):
		b.died("did not finish within --proxy-timeout", false)
		return nil
	case err != nil:
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		b.died("failed mid-answer: "+err.Error(), true)
		return nil
	case data == nil || st.ended:
		b.out = event // not a chunk, or what follows the last one: [DONE]
		if st.ended && bytes.Equal(data, []byte("[DONE]")) {
			b.eof, st.done = true, true
		}
		return nil
	}
	if bytes.Equal(data, []byte("[DONE]")) {
		b.died("ended without a finish_reason", true)
		return nil
	}
	b.a.noteUsage(data)
	var c sglangChunk
	var ids []int64
	ok := json.Unmarshal(data, &c) == nil && c.Error == nil
	if ok {
		ids, ok = c.ids()
	}
	if !ok {
		// An error, or chunks the proxy cannot follow: the rest passes
		// as the policy sends it.
		b.out, st.ended = event, true
		if len(b.rs.segs) > 0 {
			st.why = "a continuation's stream could not be followed"
		}
		return nil
	}
	b.rs.absorb(&c, ids)
	first := len(b.rs.segs) == 0
	if first {
		for i, raw := range c.promptFields() {
			if raw != nil {
				st.prompt[promptKeys[i]] = append(json.RawMessage(nil), raw...)
			}
		}
	} else {
		st.pending = nil // its tokens go out with this chunk
	}
	finish := c.Meta.FinishReason
	if isNull(finish) {
		st.last = append(st.last[:0], data...)
		if first {
			b.out = event
			st.sent = b.rs.marks()
		} else {
			b.out = b.rs.chunkEvent(data, nil, false)
		}
		return nil
	}
	var reason struct {
		Type       string `json:"type"`
		StatusCode int    `json:"status_code"`
	}
	_ = json.Unmarshal(finish, &reason)
	aborted := reason.Type == "abort" && reason.StatusCode != http.StatusBadRequest
	b.rs.endSegment(finish)
	b.a.over = true // the policy's last chunk: its generation ended
	if aborted && b.rs.remaining() > 0 && b.rs.left > 0 {
		st.pending = append([]byte(nil), data...)
		b.continueElsewhere("aborted", false)
		return nil
	}
	st.ended = true
	switch {
	case first && !aborted:
		b.out = event
		b.a.noteOutput(b.rs.prompt, b.rs.ids)
	case aborted && b.rs.remaining() <= 0:
		// Aborted with nothing left to generate: it ended by length.
		length, _ := json.Marshal(map[string]any{"type": "length", "length": len(b.rs.ids)})
		b.out = b.rs.chunkEvent(data, length, true)
	default:
		if aborted {
			st.why = "--proxy-retries exhausted"
		}
		b.out = b.rs.chunkEvent(data, nil, true)
	}
	return nil
}

// died ends the policy's part of the stream without a finish_reason: the
// tokens it streamed stand, and the rest is generated elsewhere if it can
// be. failed counts it against the policy's health.
func (b *streamBody) died(why string, failed bool) {
	rs := b.rs
	streamed := len(rs.ids) > rs.stream.seg.start // this policy's tokens came back
	rs.endSegment(nil)
	if streamed && rs.remaining() > 0 && rs.left > 0 {
		b.continueElsewhere(why, failed)
		return
	}
	b.a.failed, b.a.reason = failed, why
	b.out, b.eof = rs.lastEvent("the policy "+why), true
	rs.stream.done = true
}

// continueElsewhere ends the attempt for a continuation on another policy.
func (b *streamBody) continueElsewhere(why string, failed bool) {
	rs := b.rs
	b.a.retry, b.a.failed, b.a.reason = true, failed, why
	rs.body = rs.continuation()
	if !failed {
		rs.abortedOn = b.a.d.Policy.ID
	}
	b.eof = true
}

// readEvent reads one server-sent event: its bytes, and its data (nil for
// an event without data lines). An error is the end of the policy's
// stream: an event cut short is no event.
func (b *streamBody) readEvent() (event, data []byte, err error) {
	for {
		line, err := b.readLine()
		if err != nil {
			return nil, nil, err
		}
		text := bytes.TrimRight(line, "\r\n")
		if len(text) == 0 && len(event) == 0 {
			continue // a blank line between events
		}
		event = append(event, line...)
		if len(text) == 0 {
			return event, data, nil
		}
		if v, ok := bytes.CutPrefix(text, []byte("data:")); ok {
			if data == nil {
				data = []byte{}
			} else {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(v, []byte(" "))...)
		}
	}
}

// readLine reads one line, up to resumeMaxAnswer bytes.
func (b *streamBody) readLine() ([]byte, error) {
	b.line = b.line[:0]
	for {
		frag, err := b.br.ReadSlice('\n')
		b.line = append(b.line, frag...)
		if err != bufio.ErrBufferFull {
			return b.line, err
		}
		if len(b.line) > resumeMaxAnswer {
			return nil, errors.New("an event larger than 64 MiB")
		}
	}
}
