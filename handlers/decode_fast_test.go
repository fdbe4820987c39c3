package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/policyrouter/policyrouter/api"
)

// FuzzFastDecode holds fastDecode to encoding/json: whatever body it
// takes, encoding/json (as decode runs it) takes too, with the same value.
func FuzzFastDecode(f *testing.F) {
	for _, s := range []string{
		`{"env_id":"env-5","router":"node_affinity"}`, `{"env_id":"env-5","router":"simple"}`,
		`{"lease_id":"00000000-0000-8000-8000-000000000001"}`, `{"index":0}`, `{"num_tasks":1}`,
		` { "timeout_ms" : 0 , "min_version":-0, "load_factor":1.5e0 } `, `{}`, `{"ENV_ID":"x"}`,
		`{"env_id":"a","env_id":"b"}`, `{"index":1.0}`, `{"index":01}`, `{"load_factor":1e400}`,
		`{"num_tasks":1,"current_loads":[1]}`, `{"env_id":"\u0041"}`, `{"env_id":null}`, `{"x":1} x`,
		`{"timeout_ms":99999999999999999999}`, `{"index":-9223372036854775808}`, "{\"env_id\":\"é\"}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, newDst := range []func() any{
			func() any { return new(api.SelectRequest) },
			func() any { return new(api.ReleaseRequest) },
			func() any { return new(api.AssignRequest) },
		} {
			fast := newDst()
			if !fastDecode([]byte(body), fast) {
				if !reflect.ValueOf(fast).Elem().IsZero() {
					t.Fatalf("%q: fastDecode refused it but set %+v", body, fast)
				}
				continue
			}
			std := newDst()
			dec := json.NewDecoder(strings.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(std); err != nil {
				t.Fatalf("%q: fastDecode took it, encoding/json says %v", body, err)
			}
			if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
				t.Fatalf("%q: fastDecode took it, encoding/json finds more after it: %v", body, err)
			}
			if !reflect.DeepEqual(fast, std) {
				t.Fatalf("%q: fastDecode %+v, encoding/json %+v", body, fast, std)
			}
		}
	})
}

func TestFastDecodeTakesTheCommonBodies(t *testing.T) {
	for _, c := range []struct {
		body string
		dst  any
	}{
		{`{"env_id":"env-5","router":"node_affinity"}`, new(api.SelectRequest)},
		{`{"router":"idle_affinity","env_id":"env-12","timeout_ms":30000,"session_id":"traj-9","sticky_wait_ms":150,"load_factor":4}`, new(api.SelectRequest)},
		{`{"lease_id":"00000000-0000-8000-8000-000000000001"}`, new(api.ReleaseRequest)},
		{`{"index":3}`, new(api.ReleaseRequest)},
		{`{"num_tasks":1}`, new(api.AssignRequest)},
		{"{\n  \"num_tasks\": 8,\n  \"router\": \"power_of_two\",\n  \"min_version\": 3\n}\n", new(api.AssignRequest)},
	} {
		if !fastDecode([]byte(c.body), c.dst) {
			t.Errorf("fastDecode(%s) refused it", c.body)
		}
	}
}

// TestReadSmall: what readSmall leaves to encoding/json reads as the body
// did, whatever its size, the limit and the reads' sizes.
func TestReadSmall(t *testing.T) {
	readErr := errors.New("connection reset")
	for _, size := range []int{0, 10, fastBodyLimit - 1, fastBodyLimit, fastBodyLimit + 1, 3 * fastBodyLimit} {
		for _, limit := range []int64{5, int64(size), int64(size) + 1, 1 << 20} {
			for _, failing := range []bool{false, true} {
				body := bytes.Repeat([]byte("x"), size)
				var src io.Reader = iotest.HalfReader(bytes.NewReader(body))
				if failing {
					src = io.MultiReader(src, iotest.ErrReader(readErr))
				}
				b, ok, rest, done := readSmall(src, limit)
				if ok {
					if failing || size > fastBodyLimit || int64(size) > limit || !bytes.Equal(b, body) {
						t.Errorf("size %d limit %d failing %v: took %d bytes", size, limit, failing, len(b))
					}
					done()
					continue
				}
				got, err := io.ReadAll(rest)
				done()
				if !bytes.Equal(got, body) || (failing != (err == readErr)) || (!failing && err != nil) {
					t.Errorf("size %d limit %d failing %v: rest gave %d bytes, %v", size, limit, failing, len(got), err)
				}
			}
		}
	}
}
