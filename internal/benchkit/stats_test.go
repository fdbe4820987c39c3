package benchkit

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/routing"
)

func TestPercentile(t *testing.T) {
	s := []time.Duration{1, 2, 3, 4, 5}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0, 1}, {0.5, 3}, {0.99, 5}, {1, 5}} {
		if got := Percentile(s, tt.q); got != tt.want {
			t.Errorf("Percentile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := Percentile(nil, 0.99); got != 0 {
		t.Errorf("Percentile(nil) = %v, want 0", got)
	}
}

func TestMedian(t *testing.T) {
	xs := []float64{4, 1, 2, 3}
	if got := Median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("Median odd = %v, want 2", got)
	}
	if got := Median(xs); got != 2.5 {
		t.Errorf("Median even = %v, want 2.5", got)
	}
	if xs[0] != 4 {
		t.Errorf("Median sorted its argument: %v", xs)
	}
	if got := Median(nil); got != 0 {
		t.Errorf("Median(nil) = %v, want 0", got)
	}
}

func TestParseList(t *testing.T) {
	known := []string{"a", "b", "c"}
	got, err := ParseList("x", "thing", " c, a,,c ,b", known)
	if err != nil || !slices.Equal(got, []string{"c", "a", "b"}) {
		t.Errorf("ParseList = %q, %v; want [c a b] in the order given, each once", got, err)
	}
	_, err = ParseList("x", "thing", "a,d", known)
	if err == nil || !strings.Contains(err.Error(), `-x: unknown thing "d" (have a, b, c)`) {
		t.Errorf("ParseList of an unknown name: %v", err)
	}
}

func TestTopology(t *testing.T) {
	topo := Topology(3, 5, 2)
	want := routing.Topology{
		"node-0": {routing.KindEnv: {0, 2, 4}, routing.KindEval: {0, 2}},
		"node-1": {routing.KindEnv: {1, 3}, routing.KindEval: {1}},
	}
	if !reflect.DeepEqual(topo, want) {
		t.Errorf("Topology(3 policies, 5 envs, 2 nodes) = %v, want %v", topo, want)
	}
}
