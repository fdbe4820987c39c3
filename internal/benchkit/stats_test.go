package benchkit

import (
	"testing"
	"time"
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
