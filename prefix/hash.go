// Package prefix provides what prefix-cache-aware routing is built on: the
// block hashes of a prompt, specified to the byte so that the router, its
// followers and the Python client compute the same ones, and an Index of the
// blocks each policy is expected to hold in its KV cache.
//
// # The hash
//
// A prompt is cut into blocks and each block is hashed together with the
// hash of the block before it, so that block i's hash names the whole prefix
// up to the end of block i (a chain, as vLLM's prefix cache keys its blocks:
// hash_block_tokens in vllm-project/vllm vllm/v1/core/kv_cache_utils.py,
// commit 001cabc1be16, hashes (parent_block_hash, block token ids) with
// SHA-256 by default; the Inference Extension's prefix scorer chains 64-byte
// blocks of the prompt text the same way, hashPrompt in
// kubernetes-sigs/gateway-api-inference-extension
// pkg/epp/scheduling/framework/plugins/multi/prefix/plugin.go, commit
// 00913f9205cd). Two prompts share the hashes of exactly the blocks of their
// common prefix.
//
// The block hash function is the first 8 bytes of SHA-256, read as a
// little-endian uint64:
//
//	H(parent, data) = uint64le(SHA-256(uint64le(parent) || data)[0:8])
//
// where uint64le(x) is x as 8 bytes, least significant first. Block 0's
// parent is the seed of the prompt's kind (Seed), itself
// uint64le(SHA-256(label)[0:8]) of an ASCII label. In JSON a hash is 16
// lowercase hex digits of the uint64 (Hash.String), since JSON numbers lose
// 64-bit precision. The kinds:
//
//   - Token ids (TokenHashes): blocks of BlockTokens = 16 ids, each id as a
//     little-endian uint32, so data is 64 bytes; label
//     "policyrouter-prefix-tokens-v1". Only full blocks are hashed: the
//     trailing partial block of a prompt is not indexed.
//   - Text (TextHashes): blocks of TextBlockBytes = 64 bytes of the prompt's
//     UTF-8 text, full blocks only; label "policyrouter-prefix-text-v1". 64
//     bytes is about 16 tokens at 4 bytes a token, the Inference Extension's
//     DefaultHashBlockSize.
//   - Chat messages (ChatHashes): message by message, so that the blocks of
//     a conversation's earlier turns are the same however many turns follow.
//     A message's bytes are uint32le(len(role)) || role || content, cut into
//     blocks of 64 bytes where the last block of each message may be shorter
//     (and is hashed); data is one flag byte, 1 for a message's first block
//     and 0 for the others, then the block's bytes. Label
//     "policyrouter-prefix-chat-v1". The unit of a chat match is bytes of
//     that encoding (ChatBytes).
//
// SHA-256 rather than FNV-1a: both are in Go's and Python's standard
// libraries, but FNV-1a runs byte by byte in the interpreter, where hashing
// an 8k-token prompt took 3.8 ms against 0.38 ms with hashlib.sha256, while
// in Go SHA-256 costs 1.45 times FNV-1a (68 µs against 47 µs for 8k tokens).
// A client hashes its own prompts in lease mode, the router those it proxies.
package prefix

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
)

// Hash is the hash of one block of a prompt and of every block before it.
type Hash uint64

// Sizes of the blocks, and the most blocks a prompt is indexed by.
const (
	// BlockTokens is how many token ids a block of a token prompt holds.
	BlockTokens = 16
	// TextBlockBytes is how many bytes a block of a text prompt holds, and
	// the most a block of a chat message holds.
	TextBlockBytes = 64
	// MaxBlocks is the most blocks of one prompt that are hashed and
	// indexed: 32768 tokens of a token prompt. A longer prompt is matched
	// on its first MaxBlocks blocks; a longer list of hashes is used up to
	// MaxBlocks.
	MaxBlocks = 2048
)

// Kind is what a chain of hashes was computed from.
type Kind int

// Kinds of prompts.
const (
	Tokens Kind = iota // token ids, in blocks of BlockTokens
	Text               // text, in blocks of TextBlockBytes
	Chat               // chat messages, message by message
)

// labels are the ASCII labels whose SHA-256 seeds each kind's chain.
var labels = [...]string{
	Tokens: "policyrouter-prefix-tokens-v1",
	Text:   "policyrouter-prefix-text-v1",
	Chat:   "policyrouter-prefix-chat-v1",
}

var seeds = func() (s [len(labels)]Hash) {
	for k, l := range labels {
		d := sha256.Sum256([]byte(l))
		s[k] = Hash(binary.LittleEndian.Uint64(d[:8]))
	}
	return s
}()

// Seed returns the parent of block 0 of a chain of kind k.
func Seed(k Kind) Hash { return seeds[k] }

// TokenID is a type a token id can come in: JSON decoders give int64 or
// int, engines' own types uint32 or int32. An id is hashed as its low 32
// bits (uint32(id)); vocabularies are far smaller.
type TokenID interface {
	~uint32 | ~int32 | ~int64 | ~int | ~uint64
}

// limit is max as the cap on blocks: MaxBlocks when max <= 0 or above it.
func limit(max int) int {
	if max <= 0 || max > MaxBlocks {
		return MaxBlocks
	}
	return max
}

// TokenHashes returns the hashes of the full blocks of a token prompt, at
// most max of them (MaxBlocks when max <= 0 or larger).
func TokenHashes[T TokenID](ids []T, max int) []Hash {
	n := min(len(ids)/BlockTokens, limit(max))
	if n == 0 {
		return nil
	}
	return AppendTokenHashes(make([]Hash, 0, n), ids, max)
}

// AppendTokenHashes appends to dst the hashes of the full blocks of ids
// and returns the extended slice, continuing the chain of dst: when dst is
// not empty, ids are the tokens after its len(dst) blocks (so a prompt's
// hashes extended by the tokens generated after it are the hashes of
// prompt + output, given ids = the prompt's tokens after its last full
// block, then the output). It stops when dst holds max blocks (MaxBlocks
// when max <= 0 or larger). It allocates only to grow dst.
func AppendTokenHashes[T TokenID](dst []Hash, ids []T, max int) []Hash {
	max = limit(max)
	parent := Seed(Tokens)
	if len(dst) > 0 {
		parent = dst[len(dst)-1]
	}
	var buf [8 + 4*BlockTokens]byte
	for len(ids) >= BlockTokens && len(dst) < max {
		binary.LittleEndian.PutUint64(buf[:8], uint64(parent))
		for i, id := range ids[:BlockTokens] {
			binary.LittleEndian.PutUint32(buf[8+4*i:], uint32(id))
		}
		d := sha256.Sum256(buf[:])
		parent = Hash(binary.LittleEndian.Uint64(d[:8]))
		dst = append(dst, parent)
		ids = ids[BlockTokens:]
	}
	return dst
}

// TextHashes returns the hashes of the full TextBlockBytes-byte blocks of
// a text prompt, at most max of them (MaxBlocks when max <= 0 or larger).
// A match of n blocks is n*TextBlockBytes bytes.
func TextHashes[S ~string | ~[]byte](text S, max int) []Hash {
	n := min(len(text)/TextBlockBytes, limit(max))
	if n == 0 {
		return nil
	}
	return appendTextHashes(make([]Hash, 0, n), text[:n*TextBlockBytes])
}

// appendTextHashes appends to dst the hashes of the full blocks of text,
// continuing dst's chain (text is what follows its len(dst) blocks).
func appendTextHashes[S ~string | ~[]byte](dst []Hash, text S) []Hash {
	parent := Seed(Text)
	if len(dst) > 0 {
		parent = dst[len(dst)-1]
	}
	var buf [8 + TextBlockBytes]byte
	for ; len(text) >= TextBlockBytes; text = text[TextBlockBytes:] {
		binary.LittleEndian.PutUint64(buf[:8], uint64(parent))
		copy(buf[8:], text[:TextBlockBytes])
		d := sha256.Sum256(buf[:])
		parent = Hash(binary.LittleEndian.Uint64(d[:8]))
		dst = append(dst, parent)
	}
	return dst
}

// Message is one chat message as it is hashed: its role, and its content's
// bytes. For a string content they are the string's UTF-8 bytes (after JSON
// unescaping); for any other content (a list of parts) the caller's choice,
// the same on every request, e.g. the raw JSON as it came.
type Message struct {
	Role    string
	Content []byte
}

// encodedLen is the length of m's encoding: uint32le(len(role)) || role ||
// content.
func (m Message) encodedLen() int { return 4 + len(m.Role) + len(m.Content) }

// ChatHashes returns the hashes of chat messages, message by message (see
// the package documentation): every message ends a block, so a
// conversation's blocks do not move when turns are added. At most max
// blocks are hashed (MaxBlocks when max <= 0 or larger).
func ChatHashes(msgs []Message, max int) []Hash {
	return appendChatHashes(nil, msgs, max)
}

// appendChatHashes appends to dst the hashes of msgs, continuing dst's
// chain (msgs are the messages after those dst's blocks end with), until
// dst holds max blocks (MaxBlocks when max <= 0 or larger).
func appendChatHashes(dst []Hash, msgs []Message, max int) []Hash {
	max = limit(max)
	parent := Seed(Chat)
	if len(dst) > 0 {
		parent = dst[len(dst)-1]
	}
	var enc []byte
	var buf [9 + TextBlockBytes]byte
	for _, m := range msgs {
		enc = binary.LittleEndian.AppendUint32(enc[:0], uint32(len(m.Role)))
		enc = append(enc, m.Role...)
		enc = append(enc, m.Content...)
		for off := 0; off < len(enc); off += TextBlockBytes {
			if len(dst) >= max {
				return dst
			}
			blk := enc[off:min(off+TextBlockBytes, len(enc))]
			binary.LittleEndian.PutUint64(buf[:8], uint64(parent))
			buf[8] = 0
			if off == 0 {
				buf[8] = 1
			}
			n := copy(buf[9:], blk)
			d := sha256.Sum256(buf[:9+n])
			parent = Hash(binary.LittleEndian.Uint64(d[:8]))
			dst = append(dst, parent)
		}
	}
	return dst
}

// ChatBytes returns how many bytes of msgs' encoding the first blocks
// blocks of their ChatHashes cover: the unit of a chat prompt's match.
func ChatBytes(msgs []Message, blocks int) int {
	total := 0
	for _, m := range msgs {
		n := m.encodedLen()
		b := (n + TextBlockBytes - 1) / TextBlockBytes
		if blocks < b {
			return total + min(blocks*TextBlockBytes, n)
		}
		blocks -= b
		total += n
	}
	return total
}

const hexDigits = "0123456789abcdef"

// String returns h as 16 lowercase hex digits, its form in JSON.
func (h Hash) String() string {
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = hexDigits[h&0xf]
		h >>= 4
	}
	return string(b[:])
}

// ErrHashForm is the error of a hash that is not 16 lowercase hex digits.
var ErrHashForm = errors.New("prefix hash must be 16 lowercase hex digits")

// ParseHex parses a hash in its JSON form: exactly 16 lowercase hex digits
// (the pattern ^[0-9a-f]{16}$); anything else is ErrHashForm.
func ParseHex[S ~string | ~[]byte](s S) (Hash, error) {
	if len(s) != 16 {
		return 0, ErrHashForm
	}
	var h Hash
	for i := range 16 {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		default:
			return 0, ErrHashForm
		}
		h = h<<4 | Hash(c)
	}
	return h, nil
}

// MarshalText encodes h as String does, so that a []Hash is a JSON array
// of hex strings.
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText decodes h as ParseHex does.
func (h *Hash) UnmarshalText(b []byte) error {
	v, err := ParseHex(b)
	if err != nil {
		return err
	}
	*h = v
	return nil
}
