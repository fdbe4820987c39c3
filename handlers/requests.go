package handlers

import (
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
)

// The routing endpoints' requests (/select, /release, /assign) are each
// described once, here: a table of the type's fields in declaration order,
// each with its JSON name, how the fast decoder (decode_fast.go) sets it
// from a scalar, how it is checked, the validator's rule for it, and the
// bounds openapi.yaml states for it. The bounds come from routing's
// constants and the names from its tables. The checks run in table order,
// so the first bad field named is the first in the type.
// TestRequestTablesCoverTheTypes holds each table to its type's fields,
// TestRequestBoundsMatchOpenAPI to openapi.yaml, and
// TestRequestTablesAgreeWithValidator the checks to the rules.
//
// The checks stand in for the validator on these three only: checking
// them with the validator cost about 3 µs and 5 allocations more per
// /select (33 to 38; 68 to 80 for a /select and its /release), about a
// fifth of the handler's time (BenchmarkHandler in cmd/policyrouter-bench),
// far above the 3% of the floor ratio that would pay for a second
// statement of the rules. Every other request is checked by the validator
// alone. The messages are the validator's words.

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
	// rule is the validator's tag for the field ("" for none), which
	// check must agree with.
	rule string
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

// hotTable is a request type's table as decode uses it, for a *T passed
// as any.
type hotTable interface {
	// decodeFast decodes body into dst, a zero *T, and reports whether it
	// could; when it cannot, dst is zero again.
	decodeFast(body []byte, dst any) bool
	// checkAny checks dst, a *T, as check does.
	checkAny(dst any) error
	// validatorRules returns a zero T and its fields' rules by Go name,
	// for validator.RegisterStructValidationMapRules.
	validatorRules() (any, map[string]string)
}

// hotTables holds the tables by their request's pointer type: decode
// finds a request's table from the request itself, so no list of types
// has to be kept in step with the tables.
var hotTables = map[reflect.Type]hotTable{}

// hot registers rt as the table of *T and returns it.
func hot[T any](rt reqType[T]) reqType[T] {
	hotTables[reflect.TypeFor[*T]()] = rt
	return rt
}

// hotTableOf returns dst's table, nil for a request the validator alone
// checks.
func hotTableOf(dst any) hotTable { return hotTables[reflect.TypeOf(dst)] }

func (rt reqType[T]) decodeFast(body []byte, dst any) bool {
	return fastDecodeInto(body, dst.(*T), rt)
}

func (rt reqType[T]) checkAny(dst any) error { return rt.check(dst.(*T)) }

func (rt reqType[T]) validatorRules() (any, map[string]string) {
	typ := reflect.TypeFor[T]()
	rules := map[string]string{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		for _, rf := range rt {
			if rf.name == name && rf.rule != "" {
				rules[f.Name] = rf.rule
			}
		}
	}
	var zero T
	return zero, rules
}

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

var selectRequest = hot(reqType[api.SelectRequest]{
	stringField("env_id", func(r *api.SelectRequest) *string { return &r.EnvID }, routing.MaxEnvIDChars),
	choiceField("router", "select_router", func(r *api.SelectRequest) *string { return &r.Router }),
	intField("timeout_ms", func(r *api.SelectRequest) **int { return &r.TimeoutMS }, 0, routing.MaxWaitMS),
	versionField(func(r *api.SelectRequest) **int64 { return &r.MinVersion }),
	intField("lease_ttl_ms", func(r *api.SelectRequest) **int { return &r.LeaseTTLMS }, 0, routing.MaxTTLMS),
	sessionField(func(r *api.SelectRequest) *string { return &r.SessionID }),
	intField("sticky_wait_ms", func(r *api.SelectRequest) **int { return &r.StickyWaitMS }, 0, routing.MaxWaitMS),
	loadFactorField(func(r *api.SelectRequest) **float64 { return &r.LoadFactor }),
	choiceField("release", "release_mode", func(r *api.SelectRequest) *string { return &r.Release }),
	prefixHashesField[api.SelectRequest](),
})

var releaseRequest = hot(reqType[api.ReleaseRequest]{
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
		rule: "required_without=Index,omitempty,uuid",
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
		rule:   "required_without=LeaseID,omitempty,min=0,max=" + strconv.Itoa(routing.MaxIndex-1),
		bounds: []bound{{"minimum", 0}, {"maximum", routing.MaxIndex - 1}},
	},
	prefixHashesField[api.ReleaseRequest](),
})

var assignRequest = hot(reqType[api.AssignRequest]{
	{
		name: "num_tasks",
		set:  func(r *api.AssignRequest, v jsonScalar) bool { return v.setInt(&r.NumTasks) },
		check: func(r *api.AssignRequest) []complaint {
			if r.NumTasks == nil {
				return complain("num_tasks", "is required")
			}
			return complain("num_tasks", intRange(r.NumTasks, 0, routing.MaxTasks))
		},
		rule:   "required,min=0,max=" + strconv.Itoa(routing.MaxTasks),
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
		rule:   "omitempty,max=" + strconv.Itoa(routing.MaxTasks) + ",dive,max=" + strconv.Itoa(routing.MaxEnvIDChars),
		bounds: []bound{{"maxItems", routing.MaxTasks}, {"items.maxLength", routing.MaxEnvIDChars}},
	},
	choiceField("router", "assign_router", func(r *api.AssignRequest) *string { return &r.Router }),
	versionField(func(r *api.AssignRequest) **int64 { return &r.MinVersion }),
	{
		name: "session_ids",
		check: func(r *api.AssignRequest) []complaint {
			cs := complain("session_ids", maxEntries(len(r.SessionIDs), routing.MaxTasks))
			for i, id := range r.SessionIDs {
				if id != nil {
					cs = append(cs, checkSession("session_ids["+strconv.Itoa(i)+"]", *id)...)
				}
			}
			return cs
		},
		rule:   "omitempty,max=" + strconv.Itoa(routing.MaxTasks) + ",dive,omitempty,session_key",
		bounds: []bound{{"maxItems", routing.MaxTasks}, {"items.maxLength", routing.MaxSessionBytes}},
	},
	intField("assign_ttl_ms", func(r *api.AssignRequest) **int { return &r.AssignTTLMS }, 1, routing.MaxTTLMS),
	loadFactorField(func(r *api.AssignRequest) **float64 { return &r.LoadFactor }),
	prefixHashesField[api.AssignRequest](),
})

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
		rule:   "omitempty,min=" + strconv.Itoa(lo) + ",max=" + strconv.Itoa(hi),
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
		rule:   "omitempty,min=0",
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
				return complain(name, "must be >= "+formatFloat(routing.MinLoadFactor))
			case *v > routing.MaxLoadFactor:
				return complain(name, "must be <= "+formatFloat(routing.MaxLoadFactor))
			}
			return nil
		},
		rule:   "omitempty,min=" + formatFloat(routing.MinLoadFactor) + ",max=" + formatFloat(routing.MaxLoadFactor),
		bounds: []bound{{"minimum", routing.MinLoadFactor}, {"maximum", routing.MaxLoadFactor}},
	}
}

// stringField is a string of at most max characters (runes).
func stringField[T any](name string, p func(*T) *string, max int) reqField[T] {
	return reqField[T]{
		name:   name,
		set:    func(r *T, v jsonScalar) bool { return v.setString(p(r)) },
		check:  func(r *T) []complaint { return complain(name, maxChars(*p(r), max)) },
		rule:   "max=" + strconv.Itoa(max),
		bounds: []bound{{"maxLength", float64(max)}},
	}
}

// sessionField is a session key: at most MaxSessionBytes bytes, as
// routing.CheckSession has it.
func sessionField[T any](p func(*T) *string) reqField[T] {
	return reqField[T]{
		name:   "session_id",
		set:    func(r *T, v jsonScalar) bool { return v.setString(p(r)) },
		check:  func(r *T) []complaint { return checkSession("session_id", *p(r)) },
		rule:   "session_key",
		bounds: []bound{{"maxLength", routing.MaxSessionBytes}},
	}
}

// choiceField is a string that is empty (the default) or one of the names
// of the validator's choice tag. The decoder hands out the table's own
// string for a name, so the common bodies allocate none for it.
func choiceField[T any](name, tag string, p func(*T) *string) reqField[T] {
	names := choiceTags[tag]
	msg := "must be " + routing.NameList(names)
	return reqField[T]{
		rule: "omitempty," + tag,
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
		rule:   "omitempty,max=" + strconv.Itoa(max),
		bounds: []bound{{"maxItems", float64(max)}},
	}
}
