package handlers

import (
	"strconv"
	"unicode/utf8"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
)

// The routing endpoints' requests (/select, /release, /assign) are
// checked by hand instead of by the validator's reflection, which cost
// about 3 µs and 4 allocations per /select. Each check states the api
// type's validate tags in code, field by field in declaration order, and
// gives the same answer: the same fields, the same words, the same first
// field in the message. TestChecksMatchTags holds them to the tags, and
// TestChecksCoverEveryTag fails when a field or a tag of these types
// changes, so that a new field cannot go unchecked.

// fieldChecks collects the bad fields of one request, as validate does.
type fieldChecks struct {
	fields map[string]string
	first  string
}

func (c *fieldChecks) add(field, msg string) {
	if c.fields == nil {
		c.fields = make(map[string]string, 2)
		c.first = field + " " + msg
	}
	c.fields[field] = msg
}

func (c *fieldChecks) err() error {
	if c.fields == nil {
		return nil
	}
	return &Error{Code: api.CodeValidationFailed, Message: "invalid request: " + c.first, Fields: c.fields}
}

// intRange checks an optional integer against `omitempty,min=lo,max=hi`.
func (c *fieldChecks) intRange(field string, p *int, lo, hi int) {
	switch {
	case p == nil:
	case *p < lo:
		c.add(field, "must be >= "+strconv.Itoa(lo))
	case *p > hi:
		c.add(field, "must be <= "+strconv.Itoa(hi))
	}
}

// minVersion checks `omitempty,min=0` on a version floor.
func (c *fieldChecks) minVersion(p *int64) {
	if p != nil && *p < 0 {
		c.add("min_version", "must be >= 0")
	}
}

// loadFactor checks `omitempty,min=1,max=1000`.
func (c *fieldChecks) loadFactor(p *float64) {
	switch {
	case p == nil:
	case *p < 1:
		c.add("load_factor", "must be >= 1")
	case *p > 1000:
		c.add("load_factor", "must be <= 1000")
	}
}

// maxChars checks `max=n` on a string: n characters (runes), as the
// validator counts them.
func (c *fieldChecks) maxChars(field, s string, n int) {
	if len(s) > n && utf8.RuneCountInString(s) > n {
		c.add(field, "must have at most "+strconv.Itoa(n)+" entries or characters")
	}
}

// maxEntries checks `omitempty,max=n` on a slice.
func (c *fieldChecks) maxEntries(field string, length, n int) {
	if length > n {
		c.add(field, "must have at most "+strconv.Itoa(n)+" entries or characters")
	}
}

// routerName checks `omitempty,assign_router` or `omitempty,select_router`.
func (c *fieldChecks) routerName(name string, offered func(routing.Router) bool, names func() []string) {
	if name == "" {
		return
	}
	if r, ok := routing.LookupRouter(name); !ok || !offered(r) {
		c.add("router", "must be "+routing.NameList(names()))
	}
}

func offersSelect(r routing.Router) bool { return r.Select != nil }

func offersAssign(r routing.Router) bool { return r.Assign != nil }

// checkSelect checks an api.SelectRequest against its validate tags.
func checkSelect(req *api.SelectRequest) error {
	var c fieldChecks
	c.maxChars("env_id", req.EnvID, 256)
	c.routerName(req.Router, offersSelect, routing.SelectRouterNames)
	c.intRange("timeout_ms", req.TimeoutMS, 0, 3600000)
	c.minVersion(req.MinVersion)
	c.intRange("lease_ttl_ms", req.LeaseTTLMS, 0, 86400000)
	c.intRange("sticky_wait_ms", req.StickyWaitMS, 0, 3600000)
	c.loadFactor(req.LoadFactor)
	if _, err := routing.ParseReleaseMode("release", req.Release); err != nil {
		c.add("release", "must be "+routing.NameList(routing.ReleaseModeNames))
	}
	return c.err()
}

// checkRelease checks an api.ReleaseRequest against its validate tags.
func checkRelease(req *api.ReleaseRequest) error {
	var c fieldChecks
	switch {
	case req.LeaseID == "" && req.Index == nil:
		c.add("lease_id", "is required when index is absent")
	case req.LeaseID != "" && !isUUID(req.LeaseID):
		c.add("lease_id", "must be a UUID")
	}
	if req.Index == nil && req.LeaseID == "" {
		c.add("index", "is required when lease_id is absent")
	} else {
		c.intRange("index", req.Index, 0, 1048575)
	}
	return c.err()
}

// checkAssign checks an api.AssignRequest against its validate tags.
func checkAssign(req *api.AssignRequest) error {
	var c fieldChecks
	if req.NumTasks == nil {
		c.add("num_tasks", "is required")
	} else {
		c.intRange("num_tasks", req.NumTasks, 0, 1048576)
	}
	c.maxEntries("current_loads", len(req.CurrentLoads), 1048576)
	for i, id := range req.EnvIDs {
		if len(id) > 256 {
			c.maxChars("env_ids["+strconv.Itoa(i)+"]", id, 256)
		}
	}
	c.routerName(req.Router, offersAssign, routing.AssignRouterNames)
	c.minVersion(req.MinVersion)
	c.maxEntries("session_ids", len(req.SessionIDs), 1048576)
	c.intRange("assign_ttl_ms", req.AssignTTLMS, 1, 86400000)
	c.loadFactor(req.LoadFactor)
	return c.err()
}

// isUUID reports whether s is a UUID in its 36-character text form, any
// case, as the validator's uuid tag accepts.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}
