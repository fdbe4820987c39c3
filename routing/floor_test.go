package routing

import "testing"

// FloorOf counts only routable policies: an unavailable one at the floor
// does not make it met, and no routable policy leaves it met (the floor
// is not what stops routing then).
func TestFloorOf(t *testing.T) {
	up := func(v int64) PolicyStats { return PolicyStats{Available: true, Version: v} }
	down := func(v int64) PolicyStats { return PolicyStats{Available: false, Version: v} }
	for _, tt := range []struct {
		name     string
		floor    int64
		policies []PolicyStats
		want     Floor
		met      bool
	}{
		{"no floor", 0, []PolicyStats{up(0)}, Floor{Routable: 1, Meeting: 1}, true},
		{"no policies", 45, nil, Floor{MinVersion: 45}, true},
		{"met by one", 45, []PolicyStats{up(0), up(45)}, Floor{MinVersion: 45, Routable: 2, Meeting: 1, Highest: 45}, true},
		{"unmet", 45, []PolicyStats{up(0), up(3)}, Floor{MinVersion: 45, Routable: 2, Highest: 3}, false},
		{"met only by an unavailable one", 45, []PolicyStats{up(3), down(50)}, Floor{MinVersion: 45, Routable: 1, Highest: 3}, false},
		{"none routable", 45, []PolicyStats{down(0)}, Floor{MinVersion: 45}, true},
		{"negative is none", -1, []PolicyStats{up(0)}, Floor{Routable: 1, Meeting: 1}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := FloorOf(tt.floor, tt.policies)
			if got != tt.want || got.Met() != tt.met {
				t.Errorf("FloorOf(%d) = %+v, met %v; want %+v, met %v", tt.floor, got, got.Met(), tt.want, tt.met)
			}
		})
	}
}

// State.Floor reads the floor in force and the live policies.
func TestStateFloor(t *testing.T) {
	st := New(Options{})
	if err := st.Update([]Policy{{Index: 0, ID: "a", URL: "http://a", Capacity: 1, Version: 3}}, nil); err != nil {
		t.Fatal(err)
	}
	st.SetMinVersion(45)
	if got, want := st.Floor(), (Floor{MinVersion: 45, Routable: 1, Highest: 3}); got != want || got.Met() {
		t.Errorf("Floor() = %+v, met %v; want %+v, unmet", got, got.Met(), want)
	}
	st.SetMinVersion(3)
	if got := st.Floor(); !got.Met() || got.Meeting != 1 {
		t.Errorf("Floor() after lowering = %+v; want met by 1", got)
	}
}
