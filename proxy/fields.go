package proxy

import (
	"bytes"
	"encoding/json"
)

// fields is a proxied request's body and the top-level fields the proxy
// reads of it (the model, resuming, the prompt), found in one scan of its
// keys rather than one per reader: on an 8k-token prompt each scan costs
// as much as hashing the prompt.
//
// Each field is the value's JSON text, nil when absent, the last of its
// key winning, as encoding/json decodes: matched exactly as a decode into
// a map matches keys (resuming keeps the request as one), or without
// regard to case as a decode into a struct does (the ...Fold fields).
// scanned is false when the body is not valid JSON, not an object, or has
// a key that is not plain ASCII: each reader then decodes the body with
// encoding/json, or finds nothing in it.
type fields struct {
	raw     []byte
	valid   bool // json.Valid(raw)
	scanned bool

	stream, inputIDs, text, sampling, prompt, messages []byte
	returnLogprob, logprobStart, promptLogprobs        []byte
	modelFold, promptFold                              []byte
	// streamFold is the last "stream" (any case) that is true or false
	// (null leaves a struct's field as it was); streamFoldBad is set when
	// one was neither, which a struct decode refuses.
	streamFold    []byte
	streamFoldBad bool
}

// readFields checks body once (json.Valid) and scans its top-level keys.
func readFields(body []byte) *fields {
	f := &fields{raw: body, valid: json.Valid(body)}
	if !f.valid {
		return f
	}
	if i := skipSpace(body, 0); i == len(body) || body[i] != '{' {
		return f
	}
	f.scanned = scanTopLevel(body, func(key, val []byte) {
		switch string(key) {
		case "stream":
			f.stream = val
		case "input_ids":
			f.inputIDs = val
		case "text":
			f.text = val
		case "sampling_params":
			f.sampling = val
		case "prompt":
			f.prompt = val
		case "messages":
			f.messages = val
		case "return_logprob":
			f.returnLogprob = val
		case "logprob_start_len":
			f.logprobStart = val
		case "prompt_logprobs":
			f.promptLogprobs = val
		}
		switch {
		case bytes.EqualFold(key, []byte("model")):
			f.modelFold = val
		case bytes.EqualFold(key, []byte("prompt")):
			f.promptFold = val
		case bytes.EqualFold(key, []byte("stream")):
			switch string(val) {
			case "true", "false":
				f.streamFold = val
			case "null":
			default:
				f.streamFoldBad = true
			}
		}
	})
	return f
}

// scanTopLevel calls f with each top-level key (without its quotes) and
// value (its JSON text) of the valid JSON document b, in order; a b that
// is not an object has none. ok is false, and the scan stops, at a key
// that is not plain ASCII.
func scanTopLevel(b []byte, f func(key, val []byte)) (ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return true
	}
	i++
	for {
		i = skipSpace(b, i)
		if b[i] == '}' {
			return true
		}
		end := skipValue(b, i) // the key, a string
		key := b[i+1 : end-1]
		if !plainASCII(key) {
			return false
		}
		i = skipSpace(b, end) + 1 // past ':'
		i = skipSpace(b, i)
		end = skipValue(b, i)
		f(key, b[i:end])
		i = skipSpace(b, end)
		if b[i] == '}' {
			return true
		}
		i++ // past ','
	}
}

// plainASCII reports whether s is printable ASCII without escapes.
func plainASCII(s []byte) bool {
	for _, c := range s {
		if c < 0x20 || c >= 0x7f || c == '\\' {
			return false
		}
	}
	return true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the value of valid JSON that starts at
// b[i].
func skipValue(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			for i++; b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 { // the end of a scalar in its container
				return i
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}

// requestModel is the "model" of a JSON request body: what the OpenAI
// endpoints require, and SGLang's /generate leaves out (its server has
// one model). A body that is not a JSON object names none: the engine
// answers it. A "model" that is not a string is the client's error.
//
// It answers as decoding the body into struct{ Model json.RawMessage }
// with encoding/json would (keys matched without regard to case, the last
// one winning), from the body's scanned fields; values it cannot read
// exactly by bytes (escapes, non-ASCII), and bodies the scan could not
// read, go to encoding/json.
func requestModel(f *fields) (string, error) {
	if !f.valid {
		return "", nil
	}
	if !f.scanned {
		return requestModelJSON(f.raw)
	}
	return modelName(f.modelFold)
}

// requestModelJSON is requestModel by encoding/json alone.
func requestModelJSON(body []byte) (string, error) {
	var v struct {
		Model json.RawMessage `json:"model"`
	}
	if json.Unmarshal(body, &v) != nil {
		return "", nil
	}
	return modelName(v.Model)
}

// modelName is the string of a "model" value raw (its JSON text), ""
// when absent or null; read by bytes when it holds no escape.
func modelName(raw []byte) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	model, ok := jsonString(raw)
	if !ok {
		return "", fieldError("model", "must be a string")
	}
	return string(model), nil
}
