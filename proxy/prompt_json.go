package proxy

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/policyrouter/policyrouter/prefix"
)

// A text prompt or a chat's messages are read from the body that
// readFields checked already: decoding them again with encoding/json
// validated the whole prompt a second time, and took most of the cost of
// prefix affinity on a long chat (a 32 KB conversation: 850 µs against
// 170 µs for the body's one scan). They are read by the scan, and left to
// encoding/json where they hold escapes or an unusual shape, with the
// same result (TestChatMessagesAsDecoded).

// jsonString is the value of s, a JSON string of a valid document, as
// encoding/json decodes it into a string: the bytes between the quotes
// when there is no escape and they are valid UTF-8 (encoding/json turns
// invalid UTF-8 into U+FFFD), else encoding/json's.
func jsonString(s []byte) ([]byte, bool) {
	if len(s) < 2 || s[0] != '"' {
		return nil, false
	}
	if in := s[1 : len(s)-1]; bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in) {
		return in, true
	}
	var out string
	if json.Unmarshal(s, &out) != nil {
		return nil, false
	}
	return []byte(out), true
}

// chatMessages reads raw, a JSON array of a valid document, as messages:
// as a decode into []struct{Role string; Content json.RawMessage} reads it
// (keys matched without regard to case, the last one winning), a string
// content unquoted; ok is false where that decode fails.
func chatMessages(raw []byte) (msgs []prefix.Message, ok bool) {
	if msgs, ok, sure := scanMessages(raw); sure {
		return msgs, ok
	}
	return decodeMessages(raw)
}

// scanMessages is chatMessages by the scan; sure is false for what it
// leaves to encoding/json: an element that is not an object, a key with
// escapes or beyond ASCII, a role that is not a string, a null content.
func scanMessages(raw []byte) (msgs []prefix.Message, ok, sure bool) {
	i := skipSpace(raw, 1)
	if raw[i] == ']' {
		return nil, true, true
	}
	for {
		end := skipValue(raw, i)
		elem := raw[i:end]
		if elem[0] != '{' {
			return nil, false, false
		}
		var role, content []byte
		bad := false
		if !scanTopLevel(elem, func(key, val []byte) {
			switch {
			case bytes.EqualFold(key, []byte("role")):
				r, isString := []byte(nil), val[0] == '"'
				if isString {
					r, isString = jsonString(val)
				}
				bad = bad || !isString
				role = r
			case bytes.EqualFold(key, []byte("content")):
				bad = bad || isNull(val)
				content = val
			}
		}) || bad {
			return nil, false, false
		}
		if len(content) > 0 && content[0] == '"' {
			if c, isString := jsonString(content); isString {
				content = c
			}
		}
		msgs = append(msgs, prefix.Message{Role: string(role), Content: content})
		i = skipSpace(raw, end)
		if raw[i] == ']' {
			return msgs, true, true
		}
		i = skipSpace(raw, i+1)
	}
}

// decodeMessages is chatMessages by encoding/json.
func decodeMessages(raw []byte) ([]prefix.Message, bool) {
	var ms []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &ms) != nil {
		return nil, false
	}
	msgs := make([]prefix.Message, 0, len(ms))
	for _, m := range ms {
		content := []byte(m.Content)
		var s string
		if len(content) > 0 && content[0] == '"' && json.Unmarshal(content, &s) == nil {
			content = []byte(s)
		}
		msgs = append(msgs, prefix.Message{Role: m.Role, Content: content})
	}
	return msgs, true
}
