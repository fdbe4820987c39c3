package handlers

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/policyrouter/policyrouter/api"
)

// tableOf is what the tests read of one request table.
type tableOf struct {
	typ     reflect.Type
	names   []string        // the fields, in table order
	setters map[string]bool // whether the fast decoder sets each
	bounds  map[string][]string
}

func describeTable[T any](rt reqType[T]) tableOf {
	tab := tableOf{typ: reflect.TypeFor[T](), setters: map[string]bool{}, bounds: map[string][]string{}}
	for _, f := range rt {
		tab.names = append(tab.names, f.name)
		tab.setters[f.name] = f.set != nil
		for _, b := range f.bounds {
			tab.bounds[f.name] = append(tab.bounds[f.name], b.keyword+"="+formatNumber(b.value))
		}
		slices.Sort(tab.bounds[f.name])
	}
	return tab
}

func formatNumber(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

var requestTables = []tableOf{
	describeTable(selectRequest),
	describeTable(releaseRequest),
	describeTable(assignRequest),
}

// TestRequestTablesCoverTheTypes holds each request table to its api
// type: the same fields in the same order (so that a new field cannot go
// unchecked, and the first bad field named is the type's first), a fast
// setter for every scalar field, and no validate tag left on the type to
// say a rule a second time.
func TestRequestTablesCoverTheTypes(t *testing.T) {
	for _, tab := range requestTables {
		var fields []string
		for i := range tab.typ.NumField() {
			f := tab.typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			fields = append(fields, name)
			if tag := f.Tag.Get("validate"); tag != "" {
				t.Errorf("%s.%s has validate tag %q: its rules belong in its table in requests.go", tab.typ.Name(), f.Name, tag)
			}
			if scalar := f.Type.Kind() != reflect.Slice; tab.setters[name] != scalar {
				t.Errorf("%s.%s: fast setter %v, want %v (the fast decoder sets scalars, encoding/json arrays)", tab.typ.Name(), name, tab.setters[name], scalar)
			}
		}
		if !slices.Equal(tab.names, fields) {
			t.Errorf("%s: the table names %q, the type's fields are %q", tab.typ.Name(), tab.names, fields)
		}
	}
}

// TestRequestBoundsMatchOpenAPI holds openapi.yaml's bounds of the routing
// requests to the tables' (routing's constants), both ways: the document
// states no bound that is not checked, and every checked bound is stated.
func TestRequestBoundsMatchOpenAPI(t *testing.T) {
	doc, _, err := loadSpec()
	if err != nil {
		t.Fatal(err)
	}
	for _, tab := range requestTables {
		ref := doc.Components.Schemas[tab.typ.Name()]
		if ref == nil || ref.Value == nil {
			t.Fatalf("openapi.yaml has no schema %s", tab.typ.Name())
		}
		if got := schemaBounds(ref.Value); !reflect.DeepEqual(got, tab.bounds) {
			t.Errorf("%s: openapi.yaml states\n%v\nthe checks of requests.go hold\n%v", tab.typ.Name(), got, tab.bounds)
		}
	}
}

// schemaBounds returns the bounds a schema states of each property, as
// tableOf.bounds has them.
func schemaBounds(s *openapi3.Schema) map[string][]string {
	out := map[string][]string{}
	add := func(name, keyword string, v *float64) {
		if v != nil {
			out[name] = append(out[name], keyword+"="+formatNumber(*v))
		}
	}
	addLen := func(name, keyword string, v *uint64) {
		if v != nil {
			f := float64(*v)
			add(name, keyword, &f)
		}
	}
	for name, ref := range s.Properties {
		p := ref.Value
		add(name, "minimum", p.Min)
		add(name, "maximum", p.Max)
		addLen(name, "maxLength", p.MaxLength)
		addLen(name, "maxItems", p.MaxItems)
		if p.Items != nil && p.Items.Value != nil {
			addLen(name, "items.maxLength", p.Items.Value.MaxLength)
		}
		slices.Sort(out[name])
	}
	return out
}

// TestRequestChecksAtTheBounds sends, through both decoders, a body for
// each side of every numeric bound of every table: the bound itself
// passes, one past it is refused naming the field in the validator's
// words.
func TestRequestChecksAtTheBounds(t *testing.T) {
	checkBounds(t, selectRequest, `{`)
	checkBounds(t, releaseRequest, `{"lease_id":"00000000-0000-8000-8000-000000000001",`)
	checkBounds(t, assignRequest, `{"num_tasks":1,`)
}

func checkBounds[T any](t *testing.T, rt reqType[T], prefix string) {
	t.Helper()
	for _, f := range rt {
		for _, b := range f.bounds {
			var past float64
			var want string
			switch b.keyword {
			case "minimum":
				past, want = b.value-1, "must be >= "+formatNumber(b.value)
			case "maximum":
				past, want = b.value+1, "must be <= "+formatNumber(b.value)
			default:
				continue // lengths: TestRequestChecks
			}
			prefix := prefix
			if strings.Contains(prefix, strconv.Quote(f.name)) {
				prefix = "{"
			}
			for _, v := range []float64{b.value, past} {
				body := []byte(prefix + strconv.Quote(f.name) + ":" + formatNumber(v) + "}")
				for _, fast := range []bool{true, false} {
					var req T
					if fast && !fastDecode(body, &req) {
						t.Fatalf("the fast decoder refused %s", body)
					}
					if !fast {
						if err := json.Unmarshal(body, &req); err != nil {
							t.Fatalf("%s: %v", body, err)
						}
					}
					err := rt.check(&req)
					if v == b.value {
						if err != nil {
							t.Errorf("%s (fast %v): %v", body, fast, err)
						}
						continue
					}
					e, ok := err.(*Error)
					if !ok || e.Fields[f.name] != want || e.Message != "invalid request: "+f.name+" "+want {
						t.Errorf("%s (fast %v): %v, want %s %q", body, fast, err, f.name, want)
					}
				}
			}
		}
	}
}

// TestRequestChecks covers the rules that are not numeric bounds: lengths
// in characters, names from routing's tables, required fields, UUIDs, and
// the order in which several bad fields are named.
func TestRequestChecks(t *testing.T) {
	long := strings.Repeat("é", 256) // 256 characters, 512 bytes: allowed
	for _, c := range []struct {
		name, body string
		check      func([]byte) error
		fields     map[string]string // nil: accepted
		first      string
	}{
		{"env_id of 256 characters", `{"env_id":"` + long + `"}`, checkSelectBody, nil, ""},
		{"env_id of 257 characters", `{"env_id":"` + long + `a"}`, checkSelectBody,
			map[string]string{"env_id": "must have at most 256 entries or characters"}, "env_id"},
		{"every select router", `{"router":"power_of_two"}`, checkSelectBody, nil, ""},
		{"an unknown router", `{"router":"Simple"}`, checkSelectBody,
			map[string]string{"router": "must be simple, node_affinity, idle_affinity or power_of_two"}, "router"},
		{"a release mode", `{"release":"on_idle"}`, checkSelectBody, nil, ""},
		{"an unknown release mode", `{"release":"on-idle"}`, checkSelectBody,
			map[string]string{"release": "must be explicit or on_idle"}, "release"},
		{"two bad fields, named in type order", `{"sticky_wait_ms":-1,"env_id":"` + long + `a"}`, checkSelectBody,
			map[string]string{"env_id": "must have at most 256 entries or characters", "sticky_wait_ms": "must be >= 0"}, "env_id"},
		{"release by index", `{"index":3}`, checkReleaseBody, nil, ""},
		{"release of nothing", `{}`, checkReleaseBody,
			map[string]string{"lease_id": "is required when index is absent", "index": "is required when lease_id is absent"}, "lease_id"},
		{"a lease id in capitals", `{"lease_id":"0A1B2C3D-4E5F-6a7b-8c9d-0e1f2a3b4c5d"}`, checkReleaseBody, nil, ""},
		{"a lease id one short", `{"lease_id":"00000000-0000-8000-8000-00000000001"}`, checkReleaseBody,
			map[string]string{"lease_id": "must be a UUID"}, "lease_id"},
		{"assign without num_tasks", `{"router":"simple"}`, checkAssignBody,
			map[string]string{"num_tasks": "is required"}, "num_tasks"},
		{"an env id too long", `{"num_tasks":2,"env_ids":["a","` + long + `a"]}`, checkAssignBody,
			map[string]string{"env_ids[1]": "must have at most 256 entries or characters"}, "env_ids[1]"},
		{"an assign-only router for /assign", `{"num_tasks":1,"router":"node_affinity"}`, checkAssignBody, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.check([]byte(c.body))
			if c.fields == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			e, ok := err.(*Error)
			if !ok {
				t.Fatalf("got %v, want fields %v", err, c.fields)
			}
			if !reflect.DeepEqual(e.Fields, c.fields) || !strings.HasPrefix(e.Message, "invalid request: "+c.first+" ") {
				t.Fatalf("got %q %v, want first %s and fields %v", e.Message, e.Fields, c.first, c.fields)
			}
		})
	}
}

func checkSelectBody(b []byte) error  { return decodeAndCheck(b, selectRequest) }
func checkReleaseBody(b []byte) error { return decodeAndCheck(b, releaseRequest) }
func checkAssignBody(b []byte) error  { return decodeAndCheck(b, assignRequest) }

// decodeAndCheck decodes b with encoding/json (the fast decoder is held to
// it by FuzzFastDecode) and checks it.
func decodeAndCheck[T any](b []byte, rt reqType[T]) error {
	var req T
	if err := json.Unmarshal(b, &req); err != nil {
		return err
	}
	return rt.check(&req)
}

// TestChoicesAreInterned: the fast decoder hands out the router table's
// own strings, so a common body allocates nothing for its names, and the
// checks allocate nothing for a good request.
func TestChoicesAreInterned(t *testing.T) {
	body := []byte(`{"router":"idle_affinity","release":"on_idle","env_id":"env-1"}`)
	req := new(api.SelectRequest) // on the heap, as decode's is
	allocs := testing.AllocsPerRun(100, func() {
		*req = api.SelectRequest{}
		if !fastDecode(body, req) {
			t.Fatal("not decoded")
		}
	})
	// One allocation: the env id's string. The router and release names
	// come from the tables.
	if allocs != 1 {
		t.Fatalf("%v allocations per decode, want 1 (the env id)", allocs)
	}
	// Checking a good request allocates nothing.
	if allocs := testing.AllocsPerRun(100, func() {
		if err := selectRequest.check(req); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("%v allocations per check of a good request, want 0", allocs)
	}
}
