package proxy

import (
	"bytes"
	"encoding/json"
)

// requestModel is the "model" of a JSON request body: what the OpenAI
// endpoints require, and SGLang's /generate leaves out (its server has
// one model). A body that is not a JSON object names none: the engine
// answers it. A "model" that is not a string is the client's error.
//
// It answers as decoding the body into struct{ Model json.RawMessage }
// with encoding/json would (keys matched without regard to case, the last
// one winning), without decoding the rest of the body: it checks the body
// is valid JSON (valid: json.Valid(body), which the caller has checked
// once for every reader of the body) and scans its top-level keys. Keys
// and values it cannot read exactly by bytes (escapes, non-ASCII) go to
// encoding/json.
func requestModel(body []byte, valid bool) (string, error) {
	if !valid {
		return "", nil
	}
	raw, ok := scanModel(body)
	if !ok {
		return requestModelJSON(body)
	}
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' && plainASCII(raw[1:len(raw)-1]) {
		return string(raw[1 : len(raw)-1]), nil
	}
	var model string
	if err := json.Unmarshal(raw, &model); err != nil {
		return "", fieldError("model", "must be a string")
	}
	return model, nil
}

// requestModelJSON is requestModel by encoding/json alone.
func requestModelJSON(body []byte) (string, error) {
	var v struct {
		Model json.RawMessage `json:"model"`
	}
	if json.Unmarshal(body, &v) != nil || len(v.Model) == 0 || string(v.Model) == "null" {
		return "", nil
	}
	var model string
	if err := json.Unmarshal(v.Model, &model); err != nil {
		return "", fieldError("model", "must be a string")
	}
	return model, nil
}

// scanModel returns the value of the last top-level key of the valid
// JSON document b that equals "model" without regard to case (nil when
// there is none or b is not an object). ok is false when a key is not
// plain ASCII, for encoding/json to match.
func scanModel(b []byte) (raw []byte, ok bool) {
	ok = scanTopLevel(b, func(key, val []byte) {
		if bytes.EqualFold(key, []byte("model")) {
			raw = val
		}
	})
	if !ok {
		return nil, false
	}
	return raw, true
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
