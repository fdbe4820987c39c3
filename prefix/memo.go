package prefix

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
)

// A Memo remembers the block hashes of recent token and text prompts and
// chats, so that a prompt sent again (the n samples of a GRPO group, a
// retry) or extended (the next turn of a conversation, which resends the
// last one whole) is hashed with SHA-256 only where it is new. Its answers
// are TokenHashes's, TextHashes's and ChatHashes's, whatever it holds: it
// only skips work.
//
// It keys a prefix by a seeded maphash of its token ids laid out as
// AppendTokenHashes lays them (of its bytes, for text), chained every
// memoEvery blocks (about 1 ns a token, against 12 of SHA-256), and holds
// a prompt's hashes at its end and at every memoEvery-th block, so that a
// longer prompt finds the longest remembered prefix in at most
// len/memoEvery+1 lookups and hashes at most memoEvery-1 blocks again
// beyond it; a chat is keyed and held message by message. Two generations
// of entries bound its memory: when the newer holds max/2 blocks' hashes
// it becomes the older, and the older is dropped. A maphash collision
// (2^-64 a pair, its seed unknown outside the process) would give one
// prompt another's hashes: a routing mistake, never a wrong answer.
type Memo struct {
	seed maphash.Seed
	max  int // hashes held, both generations

	mu       sync.Mutex
	cur, old map[uint64][]Hash
	curHeld  int // hashes in cur's distinct slices
}

// memoEvery is how many blocks apart a prompt's hashes are remembered
// (besides at its end).
const memoEvery = 16

// NewMemo returns a Memo holding about max hashes (8 bytes each, plus a
// map entry every memoEvery of them); max <= 0 means 1<<20 (16M tokens,
// 8 MiB of hashes).
func NewMemo(max int) *Memo {
	if max <= 0 {
		max = 1 << 20
	}
	return &Memo{seed: maphash.MakeSeed(), max: max, cur: map[uint64][]Hash{}, old: map[uint64][]Hash{}}
}

// TokenHashes returns TokenHashes(ids, 0), hashing only the blocks after
// the longest prefix of ids it remembers, and remembers the result. The
// slice is the caller's.
func (m *Memo) TokenHashes(ids []int64) []Hash {
	n := min(len(ids)/BlockTokens, MaxBlocks)
	if n == 0 {
		return nil
	}
	return m.extend(m.keys(ids[:n*BlockTokens]), n, spanEnd, func(out []Hash, _ int) []Hash {
		return AppendTokenHashes(out, ids[len(out)*BlockTokens:], n)
	})
}

// TextHashes returns TextHashes(text, 0) as TokenHashes does
// TokenHashes's: hashing only the blocks after the longest prefix of text
// it remembers. The slice is the caller's.
func (m *Memo) TextHashes(text []byte) []Hash {
	n := min(len(text)/TextBlockBytes, MaxBlocks)
	if n == 0 {
		return nil
	}
	text = text[:n*TextBlockBytes]
	return m.extend(m.textKeys(text), n, spanEnd, func(out []Hash, _ int) []Hash {
		return appendTextHashes(out, text[len(out)*TextBlockBytes:])
	})
}

// ChatHashes returns ChatHashes(msgs, 0), hashing only the messages after
// the longest run of leading messages it remembers: a chat's blocks end
// with each message, so the next turn of a conversation, which resends
// the earlier ones, hashes only its new messages. The slice is the
// caller's.
func (m *Memo) ChatHashes(msgs []Message) []Hash {
	if len(msgs) == 0 {
		return nil
	}
	ends := make([]int, len(msgs)) // the blocks through each message
	for j, msg := range msgs {
		ends[j] = (msg.encodedLen() + TextBlockBytes - 1) / TextBlockBytes
		if j > 0 {
			ends[j] += ends[j-1]
		}
	}
	n := min(ends[len(ends)-1], MaxBlocks)
	return m.extend(m.chatKeys(msgs), n, func(j int) int { return ends[j] }, func(out []Hash, next int) []Hash {
		return appendChatHashes(out, msgs[next:], MaxBlocks)
	})
}

// extend returns the n hashes of the prompt whose prefixes keys name, the
// last key the whole (keys[i] names the first end(i) hashes, at most all):
// those of the longest prefix m remembers, extended by rest (given them
// and the index of the first key they do not cover), and remembers them.
func (m *Memo) extend(keys []uint64, n int, end func(i int) int, rest func(out []Hash, next int) []Hash) []Hash {
	h, i := m.lookup(keys)
	out := append(make([]Hash, 0, n), h...)
	if i == len(keys)-1 {
		return out
	}
	out = rest(out, i+1)
	m.store(keys, out, end)
	return out
}

// chatKeys is one key a message: the maphash of the key before and the
// message's encoding (ChatHashes's), its chain started apart from the
// token and text prompts'.
func (m *Memo) chatKeys(msgs []Message) []uint64 {
	keys := make([]uint64, 0, len(msgs))
	var h maphash.Hash
	h.SetSeed(m.seed)
	var prev [12]byte
	prev[0] = 2
	for _, msg := range msgs {
		binary.LittleEndian.PutUint32(prev[8:], uint32(len(msg.Role)))
		h.Reset()
		h.Write(prev[:])
		h.WriteString(msg.Role)
		h.Write(msg.Content)
		k := h.Sum64()
		binary.LittleEndian.PutUint64(prev[:8], k)
		keys = append(keys, k)
	}
	return keys
}

// textKeys is keys for the bytes of a text prompt, in spans of memoEvery
// blocks, its chain started apart from the token prompts' (whose key
// before the first span is 0).
func (m *Memo) textKeys(text []byte) []uint64 {
	const span = memoEvery * TextBlockBytes
	keys := make([]uint64, 0, (len(text)+span-1)/span)
	var h maphash.Hash
	h.SetSeed(m.seed)
	var prev [8]byte
	prev[0] = 1
	for len(text) > 0 {
		s := text[:min(span, len(text))]
		h.Reset()
		h.Write(prev[:])
		h.Write(s)
		k := h.Sum64()
		binary.LittleEndian.PutUint64(prev[:], k)
		keys = append(keys, k)
		text = text[len(s):]
	}
	return keys
}

// memoSpan is the ids of memoEvery blocks.
const memoSpan = memoEvery * BlockTokens

// keys returns the keys of ids's prefixes that end a span of memoEvery
// blocks, or ids: the maphash of the key before and the span's ids, laid
// out as AppendTokenHashes lays them.
func (m *Memo) keys(ids []int64) []uint64 {
	keys := make([]uint64, 0, (len(ids)+memoSpan-1)/memoSpan)
	var buf [8 + 4*memoSpan]byte
	for len(ids) > 0 {
		span := ids[:min(memoSpan, len(ids))]
		for j, id := range span {
			binary.LittleEndian.PutUint32(buf[8+4*j:], uint32(id))
		}
		k := maphash.Bytes(m.seed, buf[:8+4*len(span)])
		binary.LittleEndian.PutUint64(buf[:8], k)
		keys = append(keys, k)
		ids = ids[len(span):]
	}
	return keys
}

// lookup returns the hashes of the longest prefix that m remembers among
// those keys name (nil for none), the longest tried first, and the index
// of its key (-1 for none). The slice is m's: copy it.
func (m *Memo) lookup(keys []uint64) ([]Hash, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(keys) - 1; i >= 0; i-- {
		if h, ok := m.cur[keys[i]]; ok {
			return h, i
		}
		if h, ok := m.old[keys[i]]; ok {
			m.putLocked(keys[i], h, len(h))
			return h, i
		}
	}
	return nil, -1
}

// store remembers hs under each of keys, keys[i] naming the prefix of
// end(i) hashes (at most all of them); the entries share one copy.
func (m *Memo) store(keys []uint64, hs []Hash, end func(i int) int) {
	if len(hs) > m.max/2 {
		return // it would fill a generation alone
	}
	own := append([]Hash(nil), hs...)
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, k := range keys {
		e := min(end(i), len(own))
		held := 0
		if i == len(keys)-1 {
			held = len(own)
		}
		m.putLocked(k, own[:e:e], held)
	}
}

// spanEnd is the end of span i of memoEvery blocks: store's end for token
// and text prompts.
func spanEnd(i int) int { return (i + 1) * memoEvery }

// putLocked holds h under key in the newer generation, counting held
// more hashes, and turns the generations over when it is full.
func (m *Memo) putLocked(key uint64, h []Hash, held int) {
	if m.curHeld+held > m.max/2 && len(m.cur) > 0 {
		m.old, m.cur, m.curHeld = m.cur, make(map[uint64][]Hash, len(m.cur)), 0
	}
	m.cur[key] = h
	m.curHeld += held
}
