package handlers

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/routing"
)

// TestRequestTablesAgreeWithValidator ties each table of requests.go to
// the validator's rules it states: for random requests, valid and not,
// near every bound, the table's check and the validator give the same
// answer, the same fields named and the same message.
func TestRequestTablesAgreeWithValidator(t *testing.T) {
	s := &Server{validator: newValidator()}
	if len(hotTables) != 3 {
		t.Fatalf("%d tables, want 3 (/select, /release, /assign)", len(hotTables))
	}
	rng := rand.New(rand.NewPCG(54, 1))
	for typ, table := range hotTables {
		zero, rules := table.validatorRules()
		if len(rules) == 0 {
			t.Fatalf("%s: no rules", typ)
		}
		gen := requestGenerator(reflect.TypeOf(zero), table)
		for i := range 3000 {
			body := gen(rng, i)
			dst := reflect.New(typ.Elem()).Interface()
			if err := json.Unmarshal(body, dst); err != nil {
				t.Fatalf("%s: %v", body, err)
			}
			got, want := table.checkAny(dst), s.validateTags(dst)
			if !sameAnswer(got, want) {
				t.Fatalf("%s %s:\ntable     %v\nvalidator %v", typ.Elem().Name(), body, describeErr(got), describeErr(want))
			}
		}
	}
}

func sameAnswer(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ea, ok1 := a.(*Error)
	eb, ok2 := b.(*Error)
	return ok1 && ok2 && ea.Code == eb.Code && ea.Message == eb.Message && reflect.DeepEqual(ea.Fields, eb.Fields)
}

func describeErr(err error) string {
	if e, ok := err.(*Error); ok {
		return e.Message + " " + strconv.Quote(strings.TrimSpace(strings.Join(fieldList(e.Fields), " ")))
	}
	return strconv.Quote(strings.TrimSpace(fmtErr(err)))
}

func fieldList(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+": "+v)
	}
	return out
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// requestGenerator returns a function that makes a random JSON body of
// the struct type typ: each field present or not, its value picked by its
// kind from values at and around the table's bounds, every choice name,
// and strings of every length that matters. Body i = 0 is the empty
// object.
func requestGenerator(typ reflect.Type, table hotTable) func(*rand.Rand, int) []byte {
	boundsOf := map[string][]float64{}
	// A table's bounds, by JSON name, and the tags' numbers beside them.
	_, rules := table.validatorRules()
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		for _, part := range strings.Split(rules[f.Name], ",") {
			if _, v, ok := strings.Cut(part, "="); ok {
				if n, err := strconv.ParseFloat(v, 64); err == nil {
					boundsOf[name] = append(boundsOf[name], n)
				}
			}
		}
	}
	uuids := []string{"00000000-0000-8000-8000-000000000001", "0A1B2C3D-4E5F-6a7b-8c9d-0e1f2a3b4c5d",
		"00000000-0000-8000-8000-00000000001", "00000000-0000-8000-8000-0000000000010", "g0000000-0000-8000-8000-000000000001",
		"00000000+0000-8000-8000-000000000001"}
	strs := []string{"", "a", "env-5", strings.Repeat("é", routing.MaxEnvIDChars), strings.Repeat("é", routing.MaxEnvIDChars+1),
		strings.Repeat("a", routing.MaxEnvIDChars+1), strings.Repeat("a", routing.MaxSessionBytes), strings.Repeat("é", routing.MaxSessionBytes/2+1),
		"Simple", "on-idle"}
	strs = append(strs, uuids...)
	for _, names := range choiceTags {
		strs = append(strs, names...)
	}
	str := func(rng *rand.Rand) string { return strs[rng.IntN(len(strs))] }
	num := func(rng *rand.Rand, name string, integer bool) any {
		cands := []float64{-1, 0, 1, 2}
		for _, b := range boundsOf[name] {
			cands = append(cands, b-1, b, b+1)
			if !integer {
				cands = append(cands, b-0.5, b+0.5)
			}
		}
		if integer {
			cands = append(cands, float64(rng.IntN(1<<24)))
		}
		return cands[rng.IntN(len(cands))]
	}
	return func(rng *rand.Rand, i int) []byte {
		obj := map[string]any{}
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if i == 0 || rng.IntN(3) == 0 {
				continue
			}
			switch t := f.Type; {
			case t.Kind() == reflect.String:
				obj[name] = str(rng)
			case t.Kind() == reflect.Pointer:
				obj[name] = num(rng, name, t.Elem().Kind() != reflect.Float64)
			case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
				obj[name] = listOf(rng, str, false)
			case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Pointer:
				obj[name] = listOf(rng, func(rng *rand.Rand) any { return str(rng) }, true)
			case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Int64:
				obj[name] = listOf(rng, func(rng *rand.Rand) int64 { return int64(rng.IntN(9)) }, false)
			}
		}
		b, err := json.Marshal(obj)
		if err != nil {
			panic(err)
		}
		return b
	}
}

// listOf makes a list of up to three elements, some null when nulls.
func listOf[E any](rng *rand.Rand, elem func(*rand.Rand) E, nulls bool) []any {
	out := []any{}
	for range rng.IntN(4) {
		if nulls && rng.IntN(3) == 0 {
			out = append(out, nil)
			continue
		}
		out = append(out, elem(rng))
	}
	return out
}
