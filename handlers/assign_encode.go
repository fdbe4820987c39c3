package handlers

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
)

// policyRefs holds, for one snapshot, each policy's api.PolicyRef already
// encoded, so that an /assign answer naming a thousand policies does not
// encode them again.
type policyRefs struct {
	snap *routing.Snapshot
	json [][]byte // by snapshot position
}

// refsFor returns the encoded references of snap's policies, building them
// once per snapshot.
func refsFor(cache *atomic.Pointer[policyRefs], snap *routing.Snapshot) *policyRefs {
	if r := cache.Load(); r != nil && r.snap == snap {
		return r
	}
	ps := snap.Policies()
	r := &policyRefs{snap: snap, json: make([][]byte, len(ps))}
	for pos, p := range ps {
		b, err := json.Marshal(api.PolicyRef{ID: p.ID, URL: p.URL, NodeID: snap.Node(pos)})
		if err != nil {
			panic("handlers: encode policy ref: " + err.Error()) // strings only: cannot fail
		}
		r.json[pos] = b
	}
	cache.Store(r)
	return r
}

// writeAssignment writes the api.AssignResponse of a by hand: the same
// document encoding/json would give, but without sorting the policies' keys
// or reflecting over every task. Keys follow the order in which the
// indices first appear in the assignments.
func (s *Server) writeAssignment(w http.ResponseWriter, a routing.Assignment, envUnmapped bool) {
	refs := refsFor(&s.refs, a.Snapshot)
	b := buffers.Get().(*jsonBuffer)
	defer b.release()
	buf := b.buf.AvailableBuffer() // its spare room: b.buf itself stays empty
	if need := 64 + 8*len(a.Indices); cap(buf) < need {
		buf = make([]byte, 0, need)
	}
	buf = append(buf, `{"assignments":[`...)
	for i, idx := range a.Indices {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, int64(idx), 10)
	}
	buf = append(buf, `],"policies":{`...)
	// A few tasks look back over the earlier ones instead of allocating a
	// mark per policy.
	var seen []bool
	if len(a.Indices) > 8 {
		seen = make([]bool, len(refs.json))
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
		buf = append(buf, '"')
		buf = strconv.AppendInt(buf, int64(idx), 10)
		buf = append(buf, `":`...)
		buf = append(buf, refs.json[pos]...)
	}
	buf = append(buf, '}')
	if a.Sticky != nil {
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
	writeBody(w, http.StatusOK, buf)
}
