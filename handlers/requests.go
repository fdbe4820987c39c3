package handlers

import (
	"slices"
	"strconv"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
)

// The routing endpoints' requests (/select, /release, /assign) are each
// described once, here: a table of the type's fields in declaration order,
// each with its JSON name, how the fast decoder (decode_fast.go) sets it
// from a scalar, how it is checked, and the bounds openapi.yaml states for
// it. The bounds come from routing's constants and the names from its
// tables. The checks run in table order, so the first bad field named is
// the first in the type. TestRequestTablesCoverTheTypes holds each table
// to its type's fields, TestRequestBoundsMatchOpenAPI to openapi.yaml.
//
// The checks replace the validator's reflection, which cost about 3 µs and
// 4 allocations per /select; the messages are the validator's words.

// reqField is one field of a request type T.
type reqField[T any] struct {
	name string
	// set takes the field from one scalar of a flat body, once; nil for a
	// field that only encoding/json decodes (an array).
	set func(*T, jsonScalar) bool
	// check returns the field's complaints, nil when it is good. (A
	// collector passed in would escape through the func value and cost
	// an allocation per request.)
	check func(*T) []complaint
	// bounds are what openapi.yaml states of the field.
	bounds []bound
}

// bound is one keyword of an OpenAPI schema ("minimum", "maxLength", or
// "items.maxLength" for the elements of an array) and its value.
type bound struct {
	keyword string
	value   float64
}

// reqType is the table of one request type.
type reqType[T any] []reqField[T]

// set sets the field named key from v, and reports whether it could: an
// unknown name, a field set twice or a value of the wrong kind leaves the
// body to encoding/json.
func (rt reqType[T]) set(req *T, key []byte, v jsonScalar) bool {
	for i := range rt {
		if string(key) == rt[i].name {
			return rt[i].set != nil && rt[i].set(req, v)
		}
	}
	return false
}

// check checks every field, naming every bad one.
func (rt reqType[T]) check(req *T) error {
	var all []complaint
	for i := range rt {
		if cs := rt[i].check(req); cs != nil {
			all = append(all, cs...)
		}
	}
	return complaintsError(all)
}

var selectRequest = reqType[api.SelectRequest]{
	stringField("env_id", func(r *api.SelectRequest) *string { return &r.EnvID }, routing.MaxEnvIDChars),
	choiceField("router", func(r *api.SelectRequest) *string { return &r.Router }, routing.SelectRouterNames()),
	intField("timeout_ms", func(r *api.SelectRequest) **int { return &r.TimeoutMS }, 0, routing.MaxWaitMS),
	versionField(func(r *api.SelectRequest) **int64 { return &r.MinVersion }),
	intField("lease_ttl_ms", func(r *api.SelectRequest) **int { return &r.LeaseTTLMS }, 0, routing.MaxTTLMS),
	sessionField(func(r *api.SelectRequest) *string { return &r.SessionID }),
	intField("sticky_wait_ms", func(r *api.SelectRequest) **int { return &r.StickyWaitMS }, 0, routing.MaxWaitMS),
	loadFactorField(func(r *api.SelectRequest) **float64 { return &r.LoadFactor }),
	choiceField("release", func(r *api.SelectRequest) *string { return &r.Release }, routing.ReleaseModeNames),
	prefixHashesField[api.SelectRequest](),
}

var releaseRequest = reqType[api.ReleaseRequest]{
	{
		name: "lease_id",
		set:  func(r *api.ReleaseRequest, v jsonScalar) bool { return v.setString(&r.LeaseID) },
		check: func(r *api.ReleaseRequest) []complaint {
			switch {
			case r.LeaseID == "" && r.Index == nil:
				return complain("lease_id", "is required when index is absent")
			case r.LeaseID != "" && !isUUID(r.LeaseID):
				return complain("lease_id", "must be a UUID")
			}
			return nil
		},
	},
	{
		name: "index",
		set:  func(r *api.ReleaseRequest, v jsonScalar) bool { return v.setInt(&r.Index) },
		check: func(r *api.ReleaseRequest) []complaint {
			if r.Index == nil && r.LeaseID == "" {
				return complain("index", "is required when lease_id is absent")
			}
			return complain("index", intRange(r.Index, 0, routing.MaxIndex-1))
		},
		bounds: []bound{{"minimum", 0}, {"maximum", routing.MaxIndex - 1}},
	},
	prefixHashesField[api.ReleaseRequest](),
}

var assignRequest = reqType[api.AssignRequest]{
	{
		name: "num_tasks",
		set:  func(r *api.AssignRequest, v jsonScalar) bool { return v.setInt(&r.NumTasks) },
		check: func(r *api.AssignRequest) []complaint {
			if r.NumTasks == nil {
				return complain("num_tasks", "is required")
			}
			return complain("num_tasks", intRange(r.NumTasks, 0, routing.MaxTasks))
		},
		bounds: []bound{{"minimum", 0}, {"maximum", routing.MaxTasks}},
	},
	// One load per policy index; each load's range is checked once by the
	// routing core rather than here element by element.
	arrayField("current_loads", func(r *api.AssignRequest) int { return len(r.CurrentLoads) }, routing.MaxIndex),
	{
		name: "env_ids",
		check: func(r *api.AssignRequest) []complaint {
			cs := complain("env_ids", maxEntries(len(r.EnvIDs), routing.MaxTasks))
			for i, id := range r.EnvIDs {
				if msg := maxChars(id, routing.MaxEnvIDChars); msg != "" {
					cs = append(cs, complaint{"env_ids[" + strconv.Itoa(i) + "]", msg})
				}
			}
			return cs
		},
		bounds: []bound{{"maxItems", routing.MaxTasks}, {"items.maxLength", routing.MaxEnvIDChars}},
	},
	choiceField("router", func(r *api.AssignRequest) *string { return &r.Router }, routing.AssignRouterNames()),
	versionField(func(r *api.AssignRequest) **int64 { return &r.MinVersion }),
	withBound(arrayField("session_ids", func(r *api.AssignRequest) int { return len(r.SessionIDs) }, routing.MaxTasks),
		bound{"items.maxLength", routing.MaxSessionBytes}), // each key checked by routing.CheckSession
	intField("assign_ttl_ms", func(r *api.AssignRequest) **int { return &r.AssignTTLMS }, 1, routing.MaxTTLMS),
	loadFactorField(func(r *api.AssignRequest) **float64 { return &r.LoadFactor }),
	prefixHashesField[api.AssignRequest](),
}

// prefixHashesField is the optional prefix_hashes, an array only
// encoding/json decodes: each element's form (16 lowercase hex digits) is
// checked as it is decoded (prefix.Hash.UnmarshalText, named by
// decodeError), and a list longer than prefix.MaxBlocks is used up to it,
// never refused.
func prefixHashesField[T any]() reqField[T] {
	return reqField[T]{name: "prefix_hashes", check: func(*T) []complaint { return nil }}
}

// intField is an optional integer in [lo, hi].
func intField[T any](name string, p func(*T) **int, lo, hi int) reqField[T] {
	return reqField[T]{
		name:   name,
		set:    func(r *T, v jsonScalar) bool { return v.setInt(p(r)) },
		check:  func(r *T) []complaint { return complain(name, intRange(*p(r), lo, hi)) },
		bounds: []bound{{"minimum", float64(lo)}, {"maximum", float64(hi)}},
	}
}

// versionField is the optional weight-version floor min_version, >= 0.
func versionField[T any](p func(*T) **int64) reqField[T] {
	return reqField[T]{
		name: "min_version",
		set:  func(r *T, v jsonScalar) bool { return v.setInt64(p(r)) },
		check: func(r *T) []complaint {
			if v := *p(r); v != nil && *v < 0 {
				return complain("min_version", "must be >= 0")
			}
			return nil
		},
		bounds: []bound{{"minimum", 0}},
	}
}

// loadFactorField is the optional load_factor in [MinLoadFactor, MaxLoadFactor].
func loadFactorField[T any](p func(*T) **float64) reqField[T] {
	const name = "load_factor"
	return reqField[T]{
		name: name,
		set:  func(r *T, v jsonScalar) bool { return v.setFloat(p(r)) },
		check: func(r *T) []complaint {
			switch v := *p(r); {
			case v == nil:
			case *v < routing.MinLoadFactor:
				return complain(name, "must be >= "+strconv.FormatFloat(routing.MinLoadFactor, 'f', -1, 64))
			case *v > routing.MaxLoadFactor:
				return complain(name, "must be <= "+strconv.FormatFloat(routing.MaxLoadFactor, 'f', -1, 64))
			}
			return nil
		},
		bounds: []bound{{"minimum", routing.MinLoadFactor}, {"maximum", routing.MaxLoadFactor}},
	}
}

// stringField is a string of at most max characters (runes).
func stringField[T any](name string, p func(*T) *string, max int) reqField[T] {
	return reqField[T]{
		name:   name,
		set:    func(r *T, v jsonScalar) bool { return v.setString(p(r)) },
		check:  func(r *T) []complaint { return complain(name, maxChars(*p(r), max)) },
		bounds: []bound{{"maxLength", float64(max)}},
	}
}

// sessionField is a session key, which the routing core checks itself
// (routing.CheckSession: at most MaxSessionBytes bytes) for every caller.
func sessionField[T any](p func(*T) *string) reqField[T] {
	return reqField[T]{
		name:   "session_id",
		set:    func(r *T, v jsonScalar) bool { return v.setString(p(r)) },
		check:  func(*T) []complaint { return nil },
		bounds: []bound{{"maxLength", routing.MaxSessionBytes}},
	}
}

// withBound adds a bound that another layer checks to f's.
func withBound[T any](f reqField[T], b bound) reqField[T] {
	f.bounds = append(f.bounds, b)
	return f
}

// choiceField is a string that is empty (the default) or one of names.
// The decoder hands out the table's own string for a name, so the common
// bodies allocate none for it.
func choiceField[T any](name string, p func(*T) *string, names []string) reqField[T] {
	msg := "must be " + routing.NameList(names)
	return reqField[T]{
		name: name,
		set:  func(r *T, v jsonScalar) bool { return v.setString(p(r), names...) },
		check: func(r *T) []complaint {
			if s := *p(r); s != "" && !slices.Contains(names, s) {
				return complain(name, msg)
			}
			return nil
		},
	}
}

// arrayField is an optional array of at most max entries, which only
// encoding/json decodes.
func arrayField[T any](name string, length func(*T) int, max int) reqField[T] {
	return reqField[T]{
		name:   name,
		check:  func(r *T) []complaint { return complain(name, maxEntries(length(r), max)) },
		bounds: []bound{{"maxItems", float64(max)}},
	}
}
