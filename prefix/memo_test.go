package prefix

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// TestMemoAnswersAsTokenHashes holds the memo's answers to TokenHashes's
// over prompts sent again, extended turn by turn, cut short and changed
// inside a remembered prefix, with a memo small enough to turn its
// generations over many times.
func TestMemoAnswersAsTokenHashes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, max := range []int{0, 64, 1000} {
		m := NewMemo(max)
		var convs [][]int64
		for step := range 3000 {
			var ids []int64
			switch r := rng.IntN(5); {
			case len(convs) == 0 || r == 0: // a new conversation
				ids = make([]int64, rng.IntN(300))
				for i := range ids {
					ids[i] = rng.Int64N(50)
				}
				convs = append(convs, ids)
			case r == 1: // sent again
				ids = convs[rng.IntN(len(convs))]
			case r == 2: // the next turn
				c := rng.IntN(len(convs))
				ids = slices.Clone(convs[c])
				for range rng.IntN(70) {
					ids = append(ids, rng.Int64N(50))
				}
				convs[c] = ids
			case r == 3: // a prefix of one
				c := convs[rng.IntN(len(convs))]
				ids = c[:rng.IntN(len(c)+1)]
			default: // one token changed
				ids = slices.Clone(convs[rng.IntN(len(convs))])
				if len(ids) > 0 {
					ids[rng.IntN(len(ids))]++
				}
			}
			got, want := m.TokenHashes(ids), TokenHashes(ids, 0)
			if !slices.Equal(got, want) {
				t.Fatalf("max %d, step %d, %d ids: memo gives %d hashes, TokenHashes %d, first difference at %d",
					max, step, len(ids), len(got), len(want), firstDiff(got, want))
			}
			if len(got) > 0 {
				got[0]++ // the caller's to change: the memo must not see it
			}
		}
		if max > 0 && m.curHeld > max/2 {
			t.Fatalf("max %d: the newer generation holds %d hashes", max, m.curHeld)
		}
	}
}

func firstDiff(a, b []Hash) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestMemoCapsAtMaxBlocks holds a prompt longer than MaxBlocks blocks to
// its first MaxBlocks, as TokenHashes does.
func TestMemoCapsAtMaxBlocks(t *testing.T) {
	ids := make([]int64, (MaxBlocks+3)*BlockTokens)
	for i := range ids {
		ids[i] = int64(i)
	}
	m := NewMemo(0)
	for range 2 {
		if got := m.TokenHashes(ids); !slices.Equal(got, TokenHashes(ids, 0)) || len(got) != MaxBlocks {
			t.Fatalf("%d hashes, want TokenHashes's %d", len(got), MaxBlocks)
		}
	}
}

// BenchmarkMemo: the same 8k prompt every time (a GRPO group, the proxy
// benchmark's traffic), a conversation growing by 256 tokens a turn, and
// prompts that share nothing (every one a miss, against
// BenchmarkTokenHashes).
func BenchmarkMemo(b *testing.B) {
	const n = 8192
	base := make([]int64, n)
	for i := range base {
		base[i] = int64(1 + (i*7919)%32000)
	}
	b.Run("same", func(b *testing.B) {
		m := NewMemo(0)
		for b.Loop() {
			m.TokenHashes(base)
		}
	})
	b.Run("turns", func(b *testing.B) {
		m := NewMemo(0)
		ids := slices.Clone(base[:1024])
		for b.Loop() {
			if len(ids) >= n {
				ids = ids[:1024]
			}
			ids = append(ids, base[len(ids):len(ids)+256]...)
			m.TokenHashes(ids)
		}
	})
	b.Run("unique", func(b *testing.B) {
		m := NewMemo(0)
		ids := slices.Clone(base)
		i := 0
		for b.Loop() {
			i++
			ids[0] = int64(i)
			m.TokenHashes(ids)
		}
	})
	b.Run("sha256/n="+strconv.Itoa(n), func(b *testing.B) {
		for b.Loop() {
			TokenHashes(base, 0)
		}
	})
}

// TestMemoRemembers holds what the memo finds: a prompt sent again whole,
// and the next turn of it from the last span of memoEvery blocks that the
// first turn filled.
func TestMemoRemembers(t *testing.T) {
	m := NewMemo(0)
	ids := make([]int64, 40*BlockTokens+5)
	for i := range ids {
		ids[i] = int64(i % 97)
	}
	found := func(ids []int64) int {
		n := min(len(ids)/BlockTokens, MaxBlocks)
		h, _ := m.lookup(m.keys(ids[:n*BlockTokens]))
		return len(h)
	}
	if got := found(ids); got != 0 {
		t.Fatalf("an empty memo finds %d blocks", got)
	}
	m.TokenHashes(ids)
	if got := found(ids); got != 40 {
		t.Fatalf("sent again: found %d blocks, want 40", got)
	}
	next := append(slices.Clone(ids), make([]int64, 30*BlockTokens)...)
	if got := found(next); got != 32 {
		t.Fatalf("next turn: found %d blocks, want 32 (the last whole span)", got)
	}
	next[3]++
	if got := found(next); got != 0 {
		t.Fatalf("changed in its first block: found %d blocks, want 0", got)
	}
}

// The memo's text hashes are TextHashes's, over texts sent again,
// extended and changed, beside token prompts of the same bytes.
func TestMemoTextAnswersAsTextHashes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	m := NewMemo(2000)
	var texts [][]byte
	for step := range 2000 {
		var text []byte
		switch r := rng.IntN(4); {
		case len(texts) == 0 || r == 0:
			text = make([]byte, rng.IntN(5000))
			for i := range text {
				text[i] = byte('a' + rng.IntN(3))
			}
			texts = append(texts, text)
		case r == 1:
			text = texts[rng.IntN(len(texts))]
		case r == 2:
			c := rng.IntN(len(texts))
			text = append(slices.Clone(texts[c]), make([]byte, rng.IntN(700))...)
			texts[c] = text
		default:
			text = slices.Clone(texts[rng.IntN(len(texts))])
			if len(text) > 0 {
				text[rng.IntN(len(text))]++
			}
		}
		if got, want := m.TextHashes(text), TextHashes(text, 0); !slices.Equal(got, want) {
			t.Fatalf("step %d, %d bytes: memo gives %d hashes, TextHashes %d, first difference at %d",
				step, len(text), len(got), len(want), firstDiff(got, want))
		}
		// The same bytes as token ids are another prompt.
		ids := make([]int64, len(text)/4)
		for i := range ids {
			ids[i] = int64(text[4*i]) | int64(text[4*i+1])<<8 | int64(text[4*i+2])<<16 | int64(text[4*i+3])<<24
		}
		if got, want := m.TokenHashes(ids), TokenHashes(ids, 0); !slices.Equal(got, want) {
			t.Fatalf("step %d: the text's bytes as ids: memo and TokenHashes differ at %d", step, firstDiff(got, want))
		}
	}
}

// The memo's chat hashes are ChatHashes's, over conversations sent again,
// extended by messages, cut, and changed in one message, with messages
// long enough to reach MaxBlocks.
func TestMemoChatAnswersAsChatHashes(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	m := NewMemo(100000)
	msg := func() Message {
		n := rng.IntN(400)
		if rng.IntN(50) == 0 {
			n = 60000 // a long document: a few reach the cap
		}
		c := make([]byte, n)
		for i := range c {
			c[i] = byte('a' + rng.IntN(3))
		}
		return Message{Role: []string{"user", "assistant", "system", ""}[rng.IntN(4)], Content: c}
	}
	var convs [][]Message
	for step := range 1500 {
		var msgs []Message
		switch r := rng.IntN(4); {
		case len(convs) == 0 || r == 0:
			msgs = []Message{msg()}
			convs = append(convs, msgs)
		case r == 1:
			msgs = convs[rng.IntN(len(convs))]
		case r == 2:
			c := rng.IntN(len(convs))
			msgs = append(slices.Clip(convs[c]), msg(), msg())
			convs[c] = msgs
		default:
			msgs = slices.Clone(convs[rng.IntN(len(convs))])
			i := rng.IntN(len(msgs))
			msgs[i].Content = append(slices.Clip(msgs[i].Content), 'z')
		}
		if got, want := m.ChatHashes(msgs), ChatHashes(msgs, 0); !slices.Equal(got, want) {
			t.Fatalf("step %d, %d messages: memo gives %d hashes, ChatHashes %d, first difference at %d",
				step, len(msgs), len(got), len(want), firstDiff(got, want))
		}
	}
}
