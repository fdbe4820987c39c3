package routing

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseEnvWorker(t *testing.T) {
	const unknown = -1
	tests := []struct {
		env  string
		want int // unknown where the seed's _parse_env_worker_index returns None
	}{
		{"env-0", 0},
		{"env-12", 12},
		{"env-007", 7},
		{"env- 3 ", 3},
		{"env-\t5\n", 5},
		{"env-\v7\f", 7},
		{"env-+3", 3},
		{"env- +3", 3},
		{"env-1_0", 10},
		{"env-0_0_1", 1},
		{"env-1__0", unknown},
		{"env-_1", unknown},
		{"env-1_", unknown},
		{"env-+_1", unknown},
		{"3", 3},
		{"-3", 3},
		{"env--3", 3},
		{"a-b-7", 7},
		{"env-+-3", 3},
		{"env-3-x", unknown},
		{"env", unknown},
		{"env-x", unknown},
		{"env-", unknown},
		{"", unknown},
		{"env-+", unknown},
		{"env-++3", unknown},
		{"env-+ 3", unknown},
		{"env-3 4", unknown},
		{"env-0x10", unknown},
		{"env-1.0", unknown},
		{"env-1e3", unknown},
		{"env-0\x00", unknown},
		// Python's int() reads any Unicode decimal digit and strips Unicode
		// whitespace ...
		{"env-١٢", 12},
		{"env-٠", 0},
		{"env-٠_١", 1},
		{"env-๓", 3},
		{"env-３", 3},
		{"env-𝟕", 7},
		{"env-\u00a05", 5},
		{"env-\u20035", 5},
		{"env-\u00857", 7},
		{"env-3\u3000", 3},
		// ... but not other digits, signs or format characters ...
		{"env-\u22123", unknown}, // minus sign
		{"env-²", unknown},       // superscript two: a digit, not a decimal
		{"env-Ⅷ", unknown},       // roman numeral
		{"env-\u200b5", unknown}, // zero-width space
		// ... and among ASCII only " \t\n\v\f\r" are whitespace to int(),
		// although str.isspace holds for \x1c-\x1f too.
		{"env-\x1c5", unknown},
		{"env-\x1d5", unknown},
		{"env-\x1e5", unknown},
		{"env-5\x1f", unknown},
		// Beyond the routing tables: the seed finds no node for these.
		{"env-" + strconv.Itoa(MaxIndex-1), MaxIndex - 1},
		{"env-" + strconv.Itoa(MaxIndex), unknown},
		{"env-99999999999999999999999", unknown},
		{"env-99999999999999999999999x", unknown},
	}
	for _, tt := range tests {
		t.Run(strconv.Quote(tt.env), func(t *testing.T) {
			w, ok := ParseEnvWorker(tt.env)
			got := unknown
			if ok {
				got = w
			}
			if got != tt.want {
				t.Errorf("ParseEnvWorker(%q) = %d, %v; want %d (-1: unknown)", tt.env, w, ok, tt.want)
			}
		})
	}
}

func TestTopologyValidate(t *testing.T) {
	tests := []struct {
		name    string
		topo    Topology
		field   string   // "" for a valid topology
		mention []string // words the error message must contain
	}{
		{name: "zero", topo: Topology{}},
		{name: "empty", topo: nodes(nil)},
		{name: "valid", topo: nodes(map[string][2][]int{"a": {ints(0, 1), ints(0)}, "b": {ints(2), ints(1, 2)}})},
		{
			name:    "env without eval",
			topo:    nodes(map[string][2][]int{"a": {ints(0), ints(0)}, "node-b": {ints(1), nil}}),
			field:   "topology.node-b.eval.ids",
			mention: []string{`"node-b"`},
		},
		{
			name:    "eval without env",
			topo:    nodes(map[string][2][]int{"node-a": {nil, ints(0)}}),
			field:   "topology.node-a.env.ids",
			mention: []string{`"node-a"`},
		},
		{
			name:    "env worker on two nodes",
			topo:    nodes(map[string][2][]int{"a": {ints(0, 1), ints(0)}, "b": {ints(1), ints(1)}}),
			field:   "topology.b.env.ids",
			mention: []string{`"a"`, `"b"`, "1"},
		},
		{
			name:    "env worker twice on one node",
			topo:    nodes(map[string][2][]int{"a": {ints(4, 4), ints(0)}}),
			field:   "topology.a.env.ids",
			mention: []string{`"a"`, "4"},
		},
		{
			name:    "eval on two nodes",
			topo:    nodes(map[string][2][]int{"a": {ints(0), ints(0, 3)}, "b": {ints(1), ints(3)}}),
			field:   "topology.b.eval.ids",
			mention: []string{`"a"`, `"b"`, "3"},
		},
		{
			name:    "negative env id",
			topo:    nodes(map[string][2][]int{"a": {ints(-1), ints(0)}}),
			field:   "topology.a.env.ids",
			mention: []string{`"a"`, "-1"},
		},
		{
			name:    "negative eval id",
			topo:    nodes(map[string][2][]int{"a": {ints(0), ints(-2)}}),
			field:   "topology.a.eval.ids",
			mention: []string{`"a"`, "-2"},
		},
		{
			name:    "env id too large",
			topo:    nodes(map[string][2][]int{"a": {ints(MaxIndex), ints(0)}}),
			field:   "topology.a.env.ids",
			mention: []string{`"a"`},
		},
		{
			name:  "empty node id",
			topo:  nodes(map[string][2][]int{"": {ints(0), ints(0)}}),
			field: "topology",
		},
		{
			// Several bad nodes: the first in sorted order is named, every time.
			name:    "first bad node reported",
			topo:    nodes(map[string][2][]int{"d": {ints(3), nil}, "c": {nil, ints(2)}, "b": {ints(1), nil}, "a": {ints(0), ints(0)}}),
			field:   "topology.b.eval.ids",
			mention: []string{`"b"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Map order is random: repeat so that an order-dependent answer shows.
			for range 8 {
				err := tt.topo.Validate()
				if tt.field == "" {
					if err != nil {
						t.Fatalf("Validate() = %v; want nil", err)
					}
					continue
				}
				wantInputError(t, err, tt.field, tt.mention...)
			}
		})
	}
}

func TestUpdateErrors(t *testing.T) {
	topo := nodes(map[string][2][]int{"n0": {ints(0), ints(0, 1)}})
	tests := []struct {
		name     string
		policies []Policy
		topo     Topology
		field    string
		mention  []string
	}{
		{
			name:     "eval id not registered",
			policies: densePolicies(2),
			topo:     nodes(map[string][2][]int{"n0": {ints(0), ints(0, 5)}}),
			field:    "topology.n0.eval.ids",
			mention:  []string{"5", `"n0"`},
		},
		{
			name:     "invalid topology",
			policies: densePolicies(2),
			topo:     nodes(map[string][2][]int{"n0": {ints(0), nil}}),
			field:    "topology.n0.eval.ids",
			mention:  []string{`"n0"`},
		},
		{
			name:     "duplicate index",
			policies: []Policy{{Index: 1, ID: "a"}, {Index: 0, ID: "b"}, {Index: 1, ID: "c"}},
			topo:     topo,
			field:    "policies[2].index",
			mention:  []string{"1"},
		},
		{
			name:     "duplicate id",
			policies: []Policy{{Index: 0, ID: "a"}, {Index: 1, ID: "a"}},
			topo:     topo,
			field:    "policies[1].id",
			mention:  []string{`"a"`},
		},
		{
			name:     "negative index",
			policies: []Policy{{Index: -1, ID: "a"}, {Index: 0, ID: "b"}, {Index: 1, ID: "c"}},
			topo:     topo,
			field:    "policies[0].index",
		},
		{
			name:     "index too large",
			policies: []Policy{{Index: 0, ID: "a"}, {Index: 1, ID: "b"}, {Index: MaxIndex, ID: "c"}},
			topo:     topo,
			field:    "policies[2].index",
		},
		{
			name:     "empty id",
			policies: []Policy{{Index: 0, ID: "a"}, {Index: 1}},
			topo:     topo,
			field:    "policies[1].id",
		},
		{
			name:     "negative capacity",
			policies: []Policy{{Index: 0, ID: "a"}, {Index: 1, ID: "b", Capacity: -1}},
			topo:     topo,
			field:    "policies[1].capacity",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newState(t, Options{}, densePolicies(2), topo)
			before := st.Snapshot()
			wantInputError(t, st.Check(tt.policies, tt.topo), tt.field, tt.mention...)
			wantInputError(t, st.Update(tt.policies, tt.topo), tt.field, tt.mention...)
			if st.Snapshot() != before {
				t.Errorf("a failed Update replaced the snapshot")
			}
			if got, want := selectIndices(t, st, SelectIdle, "", ""), ints(0, 1); !slices.Equal(got, want) {
				t.Errorf("after a failed Update, Select gave %v; want %v", got, want)
			}
		})
	}
}

func TestSnapshotNodes(t *testing.T) {
	topo := nodes(map[string][2][]int{"a": {ints(0), ints(0, 2)}, "b": {ints(1), ints(1)}})
	ps := []Policy{
		{Index: 2, ID: "p2"},              // eval on a
		{Index: 1, ID: "p1", NodeID: "x"}, // registered node wins over topology b
		{Index: 0, ID: "p0"},              // eval on a
		{Index: 7, ID: "p7"},              // on no node
		{Index: 5, ID: "p5", NodeID: "b"}, // registered node only
	}
	st := newState(t, Options{}, ps, topo)
	snap := st.Snapshot()
	var gotIdx []int
	var gotNodes []string
	for pos, p := range snap.Policies() {
		gotIdx = append(gotIdx, p.Index)
		gotNodes = append(gotNodes, snap.Node(pos))
	}
	if want := ints(0, 1, 2, 5, 7); !slices.Equal(gotIdx, want) {
		t.Errorf("policy order = %v; want %v", gotIdx, want)
	}
	if want := []string{"a", "x", "a", "b", ""}; !slices.Equal(gotNodes, want) {
		t.Errorf("nodes = %q; want %q", gotNodes, want)
	}
	for _, tt := range []struct {
		env, want string
	}{{"env-0", "a"}, {"env-1", "b"}, {"env-2", ""}, {"env-x", ""}} {
		if got := snap.EnvNode(tt.env); got != tt.want {
			t.Errorf("EnvNode(%q) = %q; want %q", tt.env, got, tt.want)
		}
	}
	if pos, ok := snap.ByID("p5"); !ok || snap.Policies()[pos].Index != 5 {
		t.Errorf("ByID(p5) = %d, %v", pos, ok)
	}
	if _, ok := snap.ByIndex(3); ok {
		t.Errorf("ByIndex(3) found a policy; none is registered")
	}

	// The snapshot owns its copies: the caller's slices may change.
	topo["a"][KindEval][0] = 9
	ps[0].Index = 9
	if got := snap.Topology().Eval("a"); !slices.Equal(got, ints(0, 2)) {
		t.Errorf("snapshot topology changed with the caller's: eval ids %v", got)
	}
	if got := snap.Policies()[2].Index; got != 2 {
		t.Errorf("snapshot policy changed with the caller's: index %d", got)
	}
}

func TestUpdateMovesIdleSlots(t *testing.T) {
	topo := nodes(map[string][2][]int{"a": {ints(0), ints(0, 1)}, "b": {ints(1), ints(2)}})
	st := newState(t, Options{}, densePolicies(3), topo)
	held := mustSelect(t, st, SelectIdle, "") // p0, leased across the move
	// p1 and p0 move to b, p2 to a.
	moved := nodes(map[string][2][]int{"a": {ints(0), ints(2)}, "b": {ints(1), ints(0, 1)}})
	if err := st.Update(densePolicies(3), moved); err != nil {
		t.Fatal(err)
	}
	if got, want := selectIndices(t, st, SelectIdleAffinity, "env-0", "env-1"), ints(2, 1); !slices.Equal(got, want) {
		t.Errorf("after the move: %v; want %v", got, want)
	}
	mustRelease(t, st, held.Lease)
	if got, want := selectIndices(t, st, SelectIdleAffinity, "env-1"), ints(0); !slices.Equal(got, want) {
		t.Errorf("released after the move: %v; want %v", got, want)
	}
}

func TestInputErrorText(t *testing.T) {
	_, err := LeastLoaded(make([]int64, MaxIndex+1), 1)
	wantInputError(t, err, "current_loads")
	if got := err.Error(); !strings.HasPrefix(got, "current_loads: ") {
		t.Errorf("Error() = %q; want it to start with the field", got)
	}
}

// A topology's JSON is the API's form, and registrations stored by
// earlier versions, with bare id lists, still load.
func TestTopologyJSON(t *testing.T) {
	topo := Topology{"a": {KindEnv: {0, 1}, KindEval: {2}}}
	b, err := json.Marshal(topo)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a":{"env":{"ids":[0,1]},"eval":{"ids":[2]}}}`; string(b) != want {
		t.Errorf("Marshal = %s, want %s", b, want)
	}
	for _, in := range []string{string(b), `{"a":{"env":[0,1],"eval":[2]}}`} {
		var got Topology
		if err := json.Unmarshal([]byte(in), &got); err != nil {
			t.Fatalf("Unmarshal(%s): %v", in, err)
		}
		if !reflect.DeepEqual(got, topo) {
			t.Errorf("Unmarshal(%s) = %v, want %v", in, got, topo)
		}
	}
	var none Topology
	if err := json.Unmarshal([]byte(`null`), &none); err != nil || none != nil {
		t.Errorf("Unmarshal(null) = %v, %v; want nil", none, err)
	}
	if err := json.Unmarshal([]byte(`{"a":{"env":"x"}}`), &none); err == nil {
		t.Error("Unmarshal of a component that is neither form succeeded")
	}
}
