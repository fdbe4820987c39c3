package routing

import (
	"slices"
	"strings"
)

// An Assigner spreads the tasks of one /assign call over candidate
// policies. Implementations are stateless values; the availability filter
// has already been applied to the candidates they get.
type Assigner interface {
	// assign returns, for each of numTasks tasks, the position in in of the
	// candidate that takes it, or an *InputError / ErrNoPolicies. envIDs
	// holds one env id per task, or is empty.
	assign(in AffinityInput, numTasks int, envIDs []string) ([]int, error)
}

// A Selector picks the policy of one /select call: the picker stage,
// after the filters and the prefer stage. It sees the decision through a
// read-only View, never the ledger. A router that keeps state across
// decisions (round robin's positions) keeps it in itself: its table row's
// NewSelect makes one per routing State, and the State calls pick under its
// lock, so that state needs no lock of its own.
type Selector interface {
	// pick chooses from v: an idle unit to lease, or, for routers that
	// hand policies out without a lease, a policy. ok is false when
	// nothing can be handed out now.
	pick(v View) (c Choice, ok bool)
	// leases reports whether the router hands out idle slots under a lease
	// (and so waits when none is idle) rather than picking blind.
	leases() bool
}

// Router is one row of the table of routers: a name the API, the --router
// flag and the OpenAPI contract accept, and what it does for /assign and for
// /select.
type Router struct {
	// Name is the wire name.
	Name string
	// Assign serves /assign; nil when the router is not offered there.
	Assign Assigner
	// Select serves /select; nil when the router is not offered there.
	// For a router with state of its own it names the router (requests
	// carry it) and NewSelect makes each State's instance.
	Select    Selector
	NewSelect func() Selector
	// EnvAffine is true when the router prefers the env worker's node, so
	// that its answers count as affinity hits or fallbacks.
	EnvAffine bool
	// AssignDoc and SelectDoc say in one line what the router does.
	AssignDoc, SelectDoc string
}

// The seed's routers and their successors, by what they do. Requests name
// them through the table (Lookup*); these names serve code and tests.
var (
	// AssignLeastLoaded is the seed's SimpleRouter.
	AssignLeastLoaded Assigner = leastLoadedAssigner{}
	// AssignNodeAffinity is the seed's NodeAffinityRouter.
	AssignNodeAffinity Assigner = nodeAffinityAssigner{}
	// SelectIdle is the seed's SyncSimpleRouter: one FIFO deque of idle
	// policies.
	SelectIdle Selector = idleDeque{}
	// SelectRoundRobin is the seed's SyncNodeAffinityRouter: per-node round
	// robin, no lease.
	SelectRoundRobin Selector = newRoundRobin()
	// SelectIdleAffinity takes an idle policy on the env worker's node, else
	// the oldest idle one anywhere.
	SelectIdleAffinity Selector = idleAffinity{}
)

// routers is the one table of routers. Every list of router names (API
// validation, handler mapping, the --router flag, the OpenAPI enums) comes
// from it; a test ties it to openapi.yaml.
var routers = []Router{
	{
		Name:      "simple",
		Assign:    AssignLeastLoaded,
		Select:    SelectIdle,
		AssignDoc: "least loaded policy, ties to the lowest index (the seed's SimpleRouter)",
		SelectDoc: "oldest idle policy from one FIFO deque (the seed's SyncSimpleRouter)",
	},
	{
		Name:      "node_affinity",
		Assign:    AssignNodeAffinity,
		Select:    SelectRoundRobin,
		NewSelect: newRoundRobin,
		EnvAffine: true,
		AssignDoc: "least loaded policy on the env worker's node, else overall (the seed's NodeAffinityRouter)",
		SelectDoc: "per-node round robin over the env worker's node, else global; blind to busy policies, no lease (the seed's SyncNodeAffinityRouter)",
	},
	{
		Name:      "idle_affinity",
		Assign:    AssignNodeAffinity,
		Select:    SelectIdleAffinity,
		EnvAffine: true,
		AssignDoc: "as node_affinity: least loaded policy on the env worker's node, else overall",
		SelectDoc: "oldest idle policy on the env worker's node, else the oldest idle one anywhere",
	},
	{
		Name:      "power_of_two",
		Assign:    &powerOfTwo{},
		Select:    &powerOfTwo{},
		AssignDoc: "each task to the less loaded of two policies drawn at random, ties to the lower index (power of two choices)",
		SelectDoc: "the less loaded of two idle policies drawn at random (power of two choices)",
	},
}

// Leases reports whether the router's /select hands out leases (and so
// waits when nothing is idle, and counts each policy's requests against
// its capacity): what proxy mode needs.
func (r Router) Leases() bool { return r.Select != nil && r.Select.leases() }

// Routers returns the table of routers, in a fixed order.
func Routers() []Router { return slices.Clone(routers) }

// LookupRouter returns the router with the given name.
func LookupRouter(name string) (Router, bool) {
	for _, r := range routers {
		if r.Name == name {
			return r, true
		}
	}
	return Router{}, false
}

// AssignRouterNames lists the names /assign accepts, in table order.
func AssignRouterNames() []string {
	return names(func(r Router) bool { return r.Assign != nil })
}

// SelectRouterNames lists the names /select accepts, in table order.
func SelectRouterNames() []string {
	return names(func(r Router) bool { return r.Select != nil })
}

// DefaultRouter is the server-wide default router when none is
// configured: a name of DefaultRouterNames. It honours env ids (the env
// worker's node first) and leases idle policies; "simple" stays the seed's
// SimpleRouter and SyncSimpleRouter for those who ask for it (the seed
// adapters do).
const DefaultRouter = "idle_affinity"

// LeasingRouterNames lists the routers whose /select leases (Leases), in
// table order: those proxy mode accepts.
func LeasingRouterNames() []string { return names(Router.Leases) }

// DefaultRouterNames lists the names a server-wide default may take: those
// offered by both /assign and /select.
func DefaultRouterNames() []string {
	return names(func(r Router) bool { return r.Assign != nil && r.Select != nil })
}

func names(keep func(Router) bool) []string {
	var out []string
	for _, r := range routers {
		if keep(r) {
			out = append(out, r.Name)
		}
	}
	return out
}

// NameList renders names for messages: "a, b or c".
func NameList(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
