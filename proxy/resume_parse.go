package proxy

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// parseFor reads a resumable request of the proxied path; it returns why
// the request cannot be resumed, or its state.
func parseFor(path string, f *fields) (*resumeState, string) {
	if path == "/v1/completions" {
		return parseResumableCompletion(f)
	}
	return parseResumable(f)
}

// parseResumable reads a GenerateReqInput; it returns why the request
// cannot be resumed, or its state. A body the engine will refuse is not
// resumable either: the engine's answer says why.
//
// It answers as parseResumableJSON does, without decoding the whole body
// (which costs several times more than the rest of a proxied request's
// reading): it reads the scanned top-level fields, matched by bytes as a
// map decode matches them (the last one winning), and decodes only the
// sampling_params; the request is decoded whole when an abort needs a
// continuation. A body the scan could not read goes to encoding/json.
func parseResumable(f *fields) (*resumeState, string) {
	switch {
	case !f.valid:
		return nil, "not a JSON object"
	case !f.scanned:
		return parseResumableJSON(f.raw)
	}
	ids, text := f.inputIDs, f.text
	rs := &resumeState{raw: f.raw}
	if string(f.stream) == "true" {
		rs.stream = &streamState{prompt: make(map[string]json.RawMessage)}
	}
	if isNull(ids) {
		return nil, withoutIDs(text)
	}
	var tokens bool
	if rs.prompt, tokens = tokenIDs(ids); !tokens && json.Unmarshal(ids, &rs.prompt) != nil {
		return nil, "batch request"
	}
	return rs.samplingScan(f.sampling)
}

// parseResumableJSON is parseResumable by encoding/json alone.
func parseResumableJSON(body []byte) (*resumeState, string) {
	rs := &resumeState{}
	if json.Unmarshal(body, &rs.req) != nil || rs.req == nil {
		return nil, "not a JSON object"
	}
	if string(rs.req["stream"]) == "true" {
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
	var p struct {
		MaxNewTokens *int            `json:"max_new_tokens"`
		MinNewTokens int             `json:"min_new_tokens"`
		N            int             `json:"n"`
		JSONSchema   json.RawMessage `json:"json_schema"`
		Regex        json.RawMessage `json:"regex"`
		EBNF         json.RawMessage `json:"ebnf"`
		StructTag    json.RawMessage `json:"structural_tag"`
	}
	if !isNull(raw) {
		if json.Unmarshal(raw, &rs.sampling) != nil {
			return nil, "batch request"
		}
		if json.Unmarshal(raw, &p) != nil {
			return nil, "sampling_params not understood"
		}
	}
	grammar := [4][]byte{p.JSONSchema, p.Regex, p.EBNF, p.StructTag}
	return rs.bounds(p.N, grammar, p.MinNewTokens, rs.sampling["max_new_tokens"], p.MaxNewTokens)
}

// bounds checks the sampling_params a request was read to have (n; the
// json_schema, regex, ebnf and structural_tag of constrained decoding),
// and keeps its bounds on new tokens: min_new_tokens, and max_new_tokens
// as the map held it (rawMax) and as decoded.
func (rs *resumeState) bounds(n int, grammar [4][]byte, minNew int, rawMax []byte, maxNew *int) (*resumeState, string) {
	if n > 1 {
		return nil, "n > 1"
	}
	for _, g := range grammar {
		if !isNull(g) {
			return nil, "constrained decoding"
		}
	}
	rs.minNew = minNew
	rs.maxNew = tokenBudget(rawMax, maxNew, sglangDefaultMaxNewTokens)
	return rs, ""
}

// samplingScan is samplingParams by the top-level keys of raw (a valid
// JSON value, nil when absent), matched and read as samplingParams'
// decodes do: the struct's fields without regard to case, the map's
// "max_new_tokens" by bytes, the last one winning. The map itself is
// decoded when a continuation is built. Keys it cannot read by bytes go
// to samplingParams.
func (rs *resumeState) samplingScan(raw []byte) (*resumeState, string) {
	if isNull(raw) {
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
	}
	return rs.bounds(n, grammar, minNew, exactMax, maxNew)
}

// intValue decodes the JSON value val into *v as json.Unmarshal does,
// null leaving it as it was; false when val is not an int.
func intValue(v *int, val []byte) bool {
	if string(val) == "null" {
		return true
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
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}
