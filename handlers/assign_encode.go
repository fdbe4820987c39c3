package handlers

import (
	"encoding/json"
	"net/http"
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
func (s *Server) writeAssignment(w http.ResponseWriter, a routing.Assignment) {
	refs := refsFor(&s.refs, a.Snapshot)
	buf := make([]byte, 0, 64+8*len(a.Indices))
	buf = append(buf, `{"assignments":[`...)
	for i, idx := range a.Indices {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, int64(idx), 10)
	}
	buf = append(buf, `],"policies":{`...)
	seen := make([]bool, len(refs.json))
	first := true
	for _, idx := range a.Indices {
		pos, ok := a.Snapshot.ByIndex(idx)
		if !ok || seen[pos] {
			continue
		}
		seen[pos] = true
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
	buf = append(buf, "}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf)
}
