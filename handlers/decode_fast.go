package handlers

import (
	"bytes"
	"io"
	"strconv"
	"sync"
)

// The routing endpoints' bodies are nearly always one small flat object of
// plain strings and integers: {"env_id":"env-5","router":"simple"}.
// fastDecode reads those without encoding/json's reflection and its ten
// allocations per body. It takes only what encoding/json would decode to
// the same value without an error: exact field names, each once; strings
// of printable ASCII without escapes; integers without fraction or
// exponent; JSON numbers for floats; nothing after the object but
// whitespace. Anything else, arrays included, is left to encoding/json,
// which gives every error exactly as before. FuzzFastDecode holds the two
// together.

// fastBodyLimit is the largest body fastDecode reads; a larger one goes
// to encoding/json.
const fastBodyLimit = 4 << 10

var bodyBuffers = sync.Pool{New: func() any { return new([fastBodyLimit + 1]byte) }}

// readSmall reads body when it has at most min(limit, fastBodyLimit)
// bytes. Otherwise, or on a read error, it returns ok false and a reader
// that gives the same bytes and error body would have given from the
// start. The caller must call done once it is finished with both.
func readSmall(body io.Reader, limit int64) (b []byte, ok bool, rest io.Reader, done func()) {
	buf := bodyBuffers.Get().(*[fastBodyLimit + 1]byte)
	done = func() { bodyBuffers.Put(buf) }
	n := 0
	var err error
	for n < len(buf) && err == nil {
		var m int
		m, err = body.Read(buf[n:])
		n += m
	}
	if err == io.EOF && int64(n) <= limit {
		return buf[:n], true, nil, done
	}
	if err == nil || err == io.EOF {
		return nil, false, io.MultiReader(bytes.NewReader(buf[:n]), body), done
	}
	return nil, false, io.MultiReader(bytes.NewReader(buf[:n]), errReader{err}), done
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// fastDecode decodes body into dst, a zero request of a type with a
// table (requests.go), with the table's setters, and reports whether it
// could. When it cannot, dst is zero again.
func fastDecode(body []byte, dst any) bool {
	t := hotTableOf(dst)
	return t != nil && t.decodeFast(body, dst)
}

// fastDecodeInto decodes straight into dst, which the caller's decode
// has on the heap already: a copy here would cost an allocation, since
// the table's setters are func values that escape analysis cannot see
// through.
func fastDecodeInto[T any](body []byte, dst *T, rt reqType[T]) bool {
	if scanObject(body, func(key []byte, v jsonScalar) bool { return rt.set(dst, key, v) }) {
		return true
	}
	var zero T
	*dst = zero
	return false
}

// jsonScalar is one value of a flat object: a string's contents (no
// escapes) or a number's literal (valid JSON).
type jsonScalar struct {
	lit   []byte
	isStr bool
}

// setString sets *dst to a string value, once: a field named twice goes
// to encoding/json. A value equal to one of known is set as known's own
// string, without allocating.
func (v jsonScalar) setString(dst *string, known ...string) bool {
	if !v.isStr || *dst != "" || len(v.lit) == 0 {
		return false // "" is the zero value: a second "" could not be told apart
	}
	for _, k := range known {
		if string(v.lit) == k {
			*dst = k
			return true
		}
	}
	*dst = string(v.lit)
	return true
}

func (v jsonScalar) setInt(dst **int) bool {
	n, ok := v.int()
	if !ok || *dst != nil {
		return false
	}
	i := int(n)
	*dst = &i
	return true
}

func (v jsonScalar) setInt64(dst **int64) bool {
	n, ok := v.int()
	if !ok || *dst != nil {
		return false
	}
	*dst = &n
	return true
}

func (v jsonScalar) setFloat(dst **float64) bool {
	if v.isStr || *dst != nil {
		return false
	}
	f, err := strconv.ParseFloat(string(v.lit), 64)
	if err != nil {
		return false // out of range: encoding/json's error
	}
	*dst = &f
	return true
}

// int returns an integer literal's value: an optional minus and at most 18
// digits, so that it cannot overflow.
func (v jsonScalar) int() (int64, bool) {
	b := v.lit
	if v.isStr || len(b) == 0 {
		return 0, false
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false // a fraction or an exponent
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// scanObject walks a body that is one flat JSON object, calling set for
// each member, and reports whether the whole body was such an object and
// every set succeeded.
func scanObject(b []byte, set func(key []byte, v jsonScalar) bool) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		key, j, ok := scanString(b, i)
		if !ok {
			return false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		var v jsonScalar
		if i < len(b) && b[i] == '"' {
			v.lit, j, ok = scanString(b, i)
			v.isStr = true
		} else {
			v.lit, j, ok = scanNumber(b, i)
		}
		if !ok || !set(key, v) {
			return false
		}
		i = skipSpace(b, j)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString scans a string at b[i] of printable ASCII without escapes,
// returning its contents and the index after its closing quote.
func scanString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// scanNumber scans a JSON number at b[i]: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(b []byte, i int) ([]byte, int, bool) {
	start := i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		return nil, 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return nil, 0, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return nil, 0, false
		}
		i = j
	}
	return b[start:i], i, true
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}
