package handlers

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/api"
)

// TestChecksMatchTags holds the hand checks of checks.go to the api
// types' validate tags: on random requests around every bound, both give
// the same answer, down to the message and every field.
func TestChecksMatchTags(t *testing.T) {
	s := New(Config{})
	rng := rand.New(rand.NewPCG(1, 2))
	g := reqGen{rng: rng}
	same := func(t *testing.T, req any, got, want error) {
		t.Helper()
		if (got == nil) != (want == nil) {
			t.Fatalf("%+v: hand check %v, tags %v", req, got, want)
		}
		if got == nil {
			return
		}
		ge, we := got.(*Error), want.(*Error)
		if ge.Code != we.Code || ge.Message != we.Message || !reflect.DeepEqual(ge.Fields, we.Fields) {
			t.Fatalf("%+v:\nhand check %q %v\ntags       %q %v", req, ge.Message, ge.Fields, we.Message, we.Fields)
		}
	}
	const n = 20000
	t.Run("select", func(t *testing.T) {
		for range n {
			req := &api.SelectRequest{
				EnvID: g.str(256), Router: g.router(), TimeoutMS: g.int(0, 3600000),
				MinVersion: g.int64(), LeaseTTLMS: g.int(0, 86400000), SessionID: g.str(256),
				StickyWaitMS: g.int(0, 3600000), LoadFactor: g.float(),
				Release: []string{"", "explicit", "on_idle", "on-idle", "x"}[rng.IntN(5)],
			}
			same(t, req, checkSelect(req), s.validateTags(req))
		}
	})
	t.Run("release", func(t *testing.T) {
		for range n {
			req := &api.ReleaseRequest{LeaseID: g.lease(), Index: g.int(0, 1048575)}
			same(t, req, checkRelease(req), s.validateTags(req))
		}
	})
	t.Run("assign", func(t *testing.T) {
		for i := range n {
			req := &api.AssignRequest{
				NumTasks: g.int(0, 1048576), Router: g.router(), MinVersion: g.int64(),
				AssignTTLMS: g.int(1, 86400000), LoadFactor: g.float(),
			}
			if rng.IntN(2) == 0 {
				for range rng.IntN(4) {
					req.EnvIDs = append(req.EnvIDs, g.str(256))
				}
			}
			if i%2000 == 0 { // the slices' bounds, seldom: they are big
				req.CurrentLoads = make([]int64, 1048576+rng.IntN(2))
				req.SessionIDs = make([]*string, 1048576+rng.IntN(2))
			} else if rng.IntN(2) == 0 {
				req.CurrentLoads = make([]int64, rng.IntN(3))
				req.SessionIDs = make([]*string, rng.IntN(3))
			}
			same(t, req, checkAssign(req), s.validateTags(req))
		}
	})
}

// reqGen draws field values around the bounds of the validate tags.
type reqGen struct{ rng *rand.Rand }

func (g reqGen) int(lo, hi int) *int {
	var v int
	switch g.rng.IntN(9) {
	case 0:
		return nil
	case 1:
		v = lo - 1
	case 2:
		v = lo
	case 3:
		v = hi
	case 4:
		v = hi + 1
	case 5:
		v = -g.rng.IntN(1 << 40)
	case 6:
		v = g.rng.IntN(1 << 40)
	default:
		v = lo + g.rng.IntN(hi-lo+1)
	}
	return &v
}

func (g reqGen) int64() *int64 {
	if g.rng.IntN(3) == 0 {
		return nil
	}
	v := g.rng.Int64N(5) - 2
	return &v
}

func (g reqGen) float() *float64 {
	var v float64
	switch g.rng.IntN(6) {
	case 0:
		return nil
	case 1:
		v = 1
	case 2:
		v = 1000
	case 3:
		v = 0.999999
	case 4:
		v = 1000.000001
	default:
		v = g.rng.Float64()*2000 - 500
	}
	return &v
}

// str returns "", short strings, or strings around max characters, in
// ASCII and in two-byte runes.
func (g reqGen) str(max int) string {
	r := "a"
	if g.rng.IntN(2) == 0 {
		r = "é"
	}
	switch g.rng.IntN(6) {
	case 0:
		return ""
	case 1:
		return strings.Repeat(r, max-1)
	case 2:
		return strings.Repeat(r, max)
	case 3:
		return strings.Repeat(r, max+1)
	case 4:
		return strings.Repeat("a", max-1) + "é" // max runes, max+1 bytes
	default:
		return strings.Repeat(r, g.rng.IntN(8))
	}
}

func (g reqGen) router() string {
	names := []string{"", "simple", "node_affinity", "idle_affinity", "power_of_two", "least_loaded", "round_robin", "nope", "Simple"}
	return names[g.rng.IntN(len(names))]
}

func (g reqGen) lease() string {
	ids := []string{
		"", "00000000-0000-8000-8000-000000000001", "0A1B2C3D-4E5F-6a7b-8c9d-0e1f2a3b4c5d",
		"00000000-0000-8000-8000-00000000001", "00000000-0000-8000-8000-0000000000011",
		"00000000-0000-8000-8000-00000000000g", "000000000-000-8000-8000-000000000001",
		"00000000x0000-8000-8000-000000000001", "not a uuid",
	}
	return ids[g.rng.IntN(len(ids))]
}

// TestChecksCoverEveryTag fails when a field or a validate tag of a
// hand-checked type changes: the hand check must then change with it (and
// reqGen, so that TestChecksMatchTags draws the new field).
func TestChecksCoverEveryTag(t *testing.T) {
	for _, c := range []struct {
		v    any
		want []string
	}{
		{api.SelectRequest{}, []string{
			"env_id max=256", "router omitempty,select_router", "timeout_ms omitempty,min=0,max=3600000",
			"min_version omitempty,min=0", "lease_ttl_ms omitempty,min=0,max=86400000", "session_id ",
			"sticky_wait_ms omitempty,min=0,max=3600000", "load_factor omitempty,min=1,max=1000",
			"release omitempty,release_mode",
		}},
		{api.ReleaseRequest{}, []string{
			"lease_id required_without=Index,omitempty,uuid", "index required_without=LeaseID,omitempty,min=0,max=1048575",
		}},
		{api.AssignRequest{}, []string{
			"num_tasks required,min=0,max=1048576", "current_loads omitempty,max=1048576", "env_ids omitempty,dive,max=256",
			"router omitempty,assign_router", "min_version omitempty,min=0", "session_ids omitempty,max=1048576",
			"assign_ttl_ms omitempty,min=1,max=86400000", "load_factor omitempty,min=1,max=1000",
		}},
	} {
		typ := reflect.TypeOf(c.v)
		var got []string
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			got = append(got, name+" "+f.Tag.Get("validate"))
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s's fields and tags changed: update its check in checks.go, reqGen and this list\ngot  %q\nwant %q", typ.Name(), got, c.want)
		}
	}
}
