package handlers

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
)

// policyRefs holds, for one snapshot, each policy's entry of an /assign
// answer's "policies" object (`"index":{PolicyRef}`) and its index in
// decimal, already encoded, so that an answer naming a thousand policies
// does not encode them again.
type policyRefs struct {
	snap  *routing.Snapshot
	entry [][]byte // by snapshot position
	dec   [][]byte // by snapshot position
	size  int      // of every entry and decimal, with a separator each
}

// refsFor returns the encoded references of snap's policies, building them
// once per snapshot.
func refsFor(cache *atomic.Pointer[policyRefs], snap *routing.Snapshot) *policyRefs {
	if r := cache.Load(); r != nil && r.snap == snap {
		return r
	}
	ps := snap.Policies()
	r := &policyRefs{snap: snap, entry: make([][]byte, len(ps)), dec: make([][]byte, len(ps))}
	for pos, p := range ps {
		b, err := json.Marshal(api.PolicyRef{ID: p.ID, URL: p.URL, NodeID: snap.Node(pos)})
		if err != nil {
			panic("handlers: encode policy ref: " + err.Error()) // strings only: cannot fail
		}
		r.dec[pos] = strconv.AppendInt(nil, int64(p.Index), 10)
		e := append(append(append([]byte{'"'}, r.dec[pos]...), `":`...), b...)
		r.entry[pos] = e
		r.size += len(e) + len(r.dec[pos]) + 2
	}
	cache.Store(r)
	return r
}

// bigAnswers keeps the buffers of large /assign answers between requests:
// a thousand policies make an answer of a hundred kilobytes or more, and
// allocating it anew for every request keeps the collector busy.
var bigAnswers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledAnswer is the largest buffer bigAnswers keeps.
const maxPooledAnswer = 4 << 20

// writeAssignment writes the api.AssignResponse of a by hand: the same
// document encoding/json would give, but without sorting the policies' keys
// or reflecting over every task. Keys follow the order in which the
// indices first appear in the assignments.
func (s *Server) writeAssignment(w http.ResponseWriter, a routing.Assignment, envUnmapped bool) {
	refs := refsFor(&s.refs, a.Snapshot)
	// Room for everything but the sticky outcomes: an index is at most
	// seven digits (routing.MaxIndex), a registered one is in refs.
	need := 64 + 8*len(a.Indices) + refs.size + 16*len(a.Sticky)
	pooled := bigAnswers.Get().(*[]byte)
	defer func() {
		if cap(*pooled) <= maxPooledAnswer {
			bigAnswers.Put(pooled)
		}
	}()
	buf := (*pooled)[:0]
	if cap(buf) < need {
		buf = make([]byte, 0, need)
	}
	buf = append(buf, `{"assignments":[`...)
	for i, idx := range a.Indices {
		if i > 0 {
			buf = append(buf, ',')
		}
		if pos, ok := a.Snapshot.ByIndex(idx); ok {
			buf = append(buf, refs.dec[pos]...)
		} else {
			buf = strconv.AppendInt(buf, int64(idx), 10)
		}
	}
	buf = append(buf, `],"policies":{`...)
	// A few tasks look back over the earlier ones instead of allocating a
	// mark per policy.
	var seen []bool
	if len(a.Indices) > 8 {
		seen = make([]bool, len(refs.entry))
	}
	first := true
	for i, idx := range a.Indices {
		pos, ok := a.Snapshot.ByIndex(idx)
		if !ok {
			continue
		}
		if seen == nil {
			if slices.Contains(a.Indices[:i], idx) {
				continue
			}
		} else if seen[pos] {
			continue
		} else {
			seen[pos] = true
		}
		if !first {
			buf = append(buf, ',')
		}
		first = false
		buf = append(buf, refs.entry[pos]...)
	}
	buf = append(buf, '}')
	if len(a.Sticky) > 0 { // omitempty, as api.AssignResponse has it
		buf = append(buf, `,"sticky":[`...)
		for i, o := range a.Sticky {
			if i > 0 {
				buf = append(buf, ',')
			}
			if o == routing.NotSticky {
				buf = append(buf, "null"...)
			} else {
				buf = strconv.AppendQuote(buf, string(o))
			}
		}
		buf = append(buf, ']')
	}
	if envUnmapped {
		buf = append(buf, `,"env_unmapped":true`...)
	}
	buf = append(buf, "}\n"...)
	*pooled = buf
	writeBody(w, http.StatusOK, buf)
}
