package prefix

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strconv"
	"testing"
)

// readJSON decodes a file of testdata into v.
func readJSON(tb testing.TB, name string, v any) {
	tb.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
}

// TestTokenHashesKnownAnswers checks the vectors the Python client's test
// reads too, computed with Python's hashlib.
func TestTokenHashesKnownAnswers(t *testing.T) {
	var file struct {
		Vectors []struct {
			Name     string   `json:"name"`
			TokenIDs []int64  `json:"token_ids"`
			Hashes   []string `json:"hashes"`
		} `json:"vectors"`
	}
	readJSON(t, "token_hashes.json", &file)
	if len(file.Vectors) < 3 {
		t.Fatalf("%d vectors, want at least 3", len(file.Vectors))
	}
	for _, v := range file.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			got := hexes(TokenHashes(v.TokenIDs, 0))
			if !slices.Equal(got, v.Hashes) {
				t.Errorf("int64 ids: got %v, want %v", got, v.Hashes)
			}
			u := make([]uint32, len(v.TokenIDs))
			for i, id := range v.TokenIDs {
				u[i] = uint32(id)
			}
			if got := hexes(TokenHashes(u, 0)); !slices.Equal(got, v.Hashes) {
				t.Errorf("uint32 ids: got %v, want %v", got, v.Hashes)
			}
			// The JSON form round-trips through []Hash.
			b, _ := json.Marshal(TokenHashes(u, 0))
			var back []Hash
			if err := json.Unmarshal(b, &back); err != nil || !slices.Equal(hexes(back), v.Hashes) {
				t.Errorf("JSON %s decodes to %v, %v", b, back, err)
			}
		})
	}
}

func TestTextAndChatKnownAnswers(t *testing.T) {
	var file struct {
		Text []struct {
			Text   string   `json:"text"`
			Hashes []string `json:"hashes"`
		} `json:"text"`
		Chat []struct {
			Messages []struct{ Role, Content string } `json:"messages"`
			Hashes   []string                         `json:"hashes"`
		} `json:"chat"`
	}
	readJSON(t, "text_chat_hashes.json", &file)
	for _, v := range file.Text {
		if got := hexes(TextHashes(v.Text, 0)); !slices.Equal(got, v.Hashes) {
			t.Errorf("text: got %v, want %v", got, v.Hashes)
		}
		if got := hexes(TextHashes([]byte(v.Text), 0)); !slices.Equal(got, v.Hashes) {
			t.Errorf("text bytes: got %v, want %v", got, v.Hashes)
		}
	}
	for _, v := range file.Chat {
		var msgs []Message
		for _, m := range v.Messages {
			msgs = append(msgs, Message{Role: m.Role, Content: []byte(m.Content)})
		}
		if got := hexes(ChatHashes(msgs, 0)); !slices.Equal(got, v.Hashes) {
			t.Errorf("chat: got %v, want %v", got, v.Hashes)
		}
	}
}

func hexes(hs []Hash) []string {
	out := []string{}
	for _, h := range hs {
		out = append(out, h.String())
	}
	return out
}

func seq(n int) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = int64(i*7 + 3)
	}
	return ids
}

func TestTokenHashesChain(t *testing.T) {
	a := seq(100)
	b := slices.Clone(a)
	b[40] = 99999 // in block 2
	ha, hb := TokenHashes(a, 0), TokenHashes(b, 0)
	if len(ha) != 6 || len(hb) != 6 {
		t.Fatalf("blocks %d, %d, want 6 (100 ids, the last 4 a partial block)", len(ha), len(hb))
	}
	for i := range ha {
		if same := ha[i] == hb[i]; same != (i < 2) {
			t.Errorf("block %d: same=%v, want %v: a block's hash names its whole prefix", i, same, i < 2)
		}
	}
	// The same block content at another position hashes differently.
	rep := make([]int64, 32)
	for i := range rep {
		rep[i] = int64(i % 16)
	}
	if h := TokenHashes(rep, 0); h[0] == h[1] {
		t.Error("equal blocks at positions 0 and 1 hash the same")
	}
	tests := []struct {
		max, want int
	}{{0, 6}, {-1, 6}, {3, 3}, {6, 6}, {100, 6}}
	for _, tt := range tests {
		if got := TokenHashes(a, tt.max); len(got) != tt.want || !slices.Equal(got, ha[:tt.want]) {
			t.Errorf("max %d: %d hashes, want the first %d", tt.max, len(got), tt.want)
		}
	}
	if got := TokenHashes(seq(16*(MaxBlocks+5)), 0); len(got) != MaxBlocks {
		t.Errorf("a long prompt: %d blocks, want MaxBlocks", len(got))
	}
}

// TestAppendTokenHashes: a prompt's hashes continued with the tokens after
// its last full block and the output are the hashes of prompt + output.
func TestAppendTokenHashes(t *testing.T) {
	prompt, output := seq(70), seq(50)
	whole := TokenHashes(append(slices.Clone(prompt), output...), 0)
	hp := TokenHashes(prompt, 0)
	rest := append(slices.Clone(prompt[len(hp)*BlockTokens:]), output...)
	got := AppendTokenHashes(slices.Clone(hp), rest, 0)
	if !slices.Equal(got, whole) {
		t.Errorf("continued chain %v, want %v", got, whole)
	}
	if got := AppendTokenHashes(slices.Clone(hp), rest, 5); len(got) != 5 || !slices.Equal(got, whole[:5]) {
		t.Errorf("continued to max 5: %v", got)
	}
}

func TestChatHashes(t *testing.T) {
	sys := Message{Role: "system", Content: []byte("be brief")}
	long := Message{Role: "user", Content: make([]byte, 150)} // 4+4+150 = 158 bytes: 3 blocks
	reply := Message{Role: "assistant", Content: []byte("ok")}
	one := ChatHashes([]Message{sys, long}, 0)
	two := ChatHashes([]Message{sys, long, reply}, 0)
	if len(one) != 4 || len(two) != 5 || !slices.Equal(two[:4], one) {
		t.Fatalf("turns: %d then %d blocks, want 4 then 5 sharing the first 4", len(one), len(two))
	}
	// A message boundary is part of the hash: the same bytes in one message
	// hash otherwise.
	joined := Message{Role: "system", Content: []byte("be brief\x04\x00\x00\x00user")}
	if h := ChatHashes([]Message{joined}, 0); h[0] == one[0] {
		t.Error("one message hashes as the first of two")
	}
	if h := ChatHashes([]Message{{Role: "user", Content: []byte("a")}}, 0); h[0] == ChatHashes([]Message{{Role: "use", Content: []byte("ra")}}, 0)[0] {
		t.Error("role and content are not told apart")
	}
	if got := ChatHashes([]Message{sys, long, reply}, 2); !slices.Equal(got, two[:2]) {
		t.Errorf("max 2: %v", got)
	}
	msgs := []Message{sys, long, reply}
	for _, tt := range []struct{ blocks, want int }{{0, 0}, {1, 18}, {2, 18 + 64}, {4, 18 + 158}, {5, 18 + 158 + 15}, {9, 18 + 158 + 15}} {
		if got := ChatBytes(msgs, tt.blocks); got != tt.want {
			t.Errorf("ChatBytes(%d blocks) = %d, want %d", tt.blocks, got, tt.want)
		}
	}
}

func TestParseHex(t *testing.T) {
	tests := []struct {
		in   string
		want Hash
		err  bool
	}{
		{"0000000000000000", 0, false},
		{"ffffffffffffffff", ^Hash(0), false},
		{"0123456789abcdef", 0x0123456789abcdef, false},
		{"0123456789ABCDEF", 0, true},
		{"0123456789abcde", 0, true},
		{"0123456789abcdef0", 0, true},
		{"0x23456789abcdef", 0, true},
		{"", 0, true},
		{"g123456789abcdef", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseHex(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseHex(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
		if err != nil && !errors.Is(err, ErrHashForm) {
			t.Errorf("ParseHex(%q): error %v is not ErrHashForm", tt.in, err)
		}
		if err == nil && got.String() != tt.in {
			t.Errorf("String() = %q, want %q", got.String(), tt.in)
		}
	}
	var hs []Hash
	if err := json.Unmarshal([]byte(`["00000000000000ff", 255]`), &hs); err == nil {
		t.Error("a JSON number decoded as a hash")
	}
}

func FuzzParseHex(f *testing.F) {
	f.Add("0123456789abcdef")
	f.Add("zz")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHex(s)
		if err != nil {
			return
		}
		if h.String() != s {
			t.Fatalf("ParseHex(%q).String() = %q", s, h.String())
		}
		if v, _ := strconv.ParseUint(s, 16, 64); Hash(v) != h {
			t.Fatalf("ParseHex(%q) = %x, strconv says %x", s, uint64(h), v)
		}
	})
}

func BenchmarkTokenHashes(b *testing.B) {
	for _, n := range []int{1024, 8192, 32768} {
		ids := make([]uint32, n)
		for i := range ids {
			ids[i] = uint32(i * 7)
		}
		b.Run("n="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(4 * n))
			dst := make([]Hash, 0, MaxBlocks)
			for b.Loop() {
				dst = AppendTokenHashes(dst[:0], ids, 0)
			}
		})
	}
}
