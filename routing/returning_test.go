package routing

import (
	"testing"
	"time"
)

// ExpectReturn records when policies are due back; Returning says so
// until then, and not after, nor once the record is forgotten.
func TestReturning(t *testing.T) {
	st := New(Options{})
	now := time.Unix(1000, 0)
	st.ExpectReturn(now.Add(time.Minute), "a", "b")
	st.ExpectReturn(time.Time{}, "b")
	for _, tt := range []struct {
		id   string
		at   time.Time
		want bool
	}{
		{"a", now, true},
		{"a", now.Add(time.Minute), false},
		{"b", now, false},
		{"c", now, false},
	} {
		until, ok := st.Returning(tt.id, tt.at)
		if ok != tt.want || ok && !until.Equal(now.Add(time.Minute)) {
			t.Errorf("Returning(%q, %v) = %v, %v; want %v", tt.id, tt.at, until, ok, tt.want)
		}
	}
}
