package proxy

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/prefix"
)

// chatMessages reads what encoding/json reads, over random message lists
// with escapes, invalid UTF-8, keys in other cases, keys twice, null and
// non-string roles and contents, and elements that are not objects.
func TestChatMessagesAsDecoded(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	strs := []string{`"user"`, `"system"`, `""`, `"a\"b"`, `"\u00e9t\u00e9"`, `"caf\u00e9 \n"`, "\"caf\xe9\"", `"日本語"`,
		`null`, `12`, `true`, `[{"type":"text","text":"hi"}]`, `{"x":1}`}
	keys := []string{"role", "content", "Role", "CONTENT", "name", "r\\u006fle", "rôle"}
	for n := range 5000 {
		var b strings.Builder
		b.WriteByte('[')
		for e := range rng.IntN(4) {
			if e > 0 {
				b.WriteString(", ")
			}
			switch rng.IntN(12) {
			case 0:
				b.WriteString(`null`)
				continue
			case 1:
				b.WriteString(`"text"`)
				continue
			}
			b.WriteByte('{')
			for k := range rng.IntN(4) {
				if k > 0 {
					b.WriteByte(',')
				}
				b.WriteString(`"` + keys[rng.IntN(len(keys))] + `": ` + strs[rng.IntN(len(strs))])
			}
			b.WriteByte('}')
		}
		b.WriteByte(']')
		raw := []byte(b.String())
		if !json.Valid(raw) {
			continue
		}
		got, gotOK := chatMessages(raw)
		want, wantOK := decodeMessages(raw)
		if gotOK != wantOK || len(got) != len(want) {
			t.Fatalf("case %d %s: scan %v %q; encoding/json %v %q", n, raw, gotOK, got, wantOK, want)
		}
		for i := range got {
			if got[i].Role != want[i].Role || !bytes.Equal(got[i].Content, want[i].Content) {
				t.Fatalf("case %d %s, message %d: scan %q %q; encoding/json %q %q", n, raw, i,
					got[i].Role, got[i].Content, want[i].Role, want[i].Content)
			}
		}
	}
}

// jsonString reads what encoding/json reads into a string.
func TestJSONStringAsDecoded(t *testing.T) {
	for _, s := range []string{`""`, `"plain"`, `"a\"b"`, `"\u00e9"`, "\"caf\xe9\"", `"tab\there"`, `"日本"`, `"\ud83d\ude00"`} {
		got, ok := jsonString([]byte(s))
		var want string
		err := json.Unmarshal([]byte(s), &want)
		if ok != (err == nil) || string(got) != want {
			t.Errorf("jsonString(%s) = %q %v; encoding/json %q %v", s, got, ok, want, err)
		}
	}
}

// BenchmarkPromptOfChat: a 32 KB conversation of 16 messages and a text
// prompt of the same size, each sent again (its hashes remembered) and new
// on every request (4 bytes of its first message or of the text
// changed), read and hashed as the proxy does.
func BenchmarkPromptOfChat(b *testing.B) {
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 730)
	var msgs []map[string]string
	for range 16 {
		msgs = append(msgs, map[string]string{"role": "user", "content": text[:2048]})
	}
	chat, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	completion, _ := json.Marshal(map[string]any{"model": "m", "prompt": text})
	for _, c := range []struct {
		name, path string
		body       []byte
		vary       bool
	}{
		{"chat-same", "/v1/chat/completions", chat, false}, {"chat-new", "/v1/chat/completions", chat, true},
		{"text-same", "/v1/completions", completion, false}, {"text-new", "/v1/completions", completion, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			body := bytes.Clone(c.body)
			f := readFields(body)
			at := bytes.Index(body, []byte("The quick")) // the first message's or the text's first byte
			memo := prefix.NewMemo(0)
			n := 0
			for b.Loop() {
				if c.vary { // n in base 26, in 4 bytes from at
					n++
					for i, d := 0, n; i < 4; i, d = i+1, d/26 {
						body[at+i] = 'A' + byte(d%26)
					}
				}
				if promptOf(c.path, f, nil, memo) == nil {
					b.Fatal("no prompt")
				}
			}
		})
	}
}
