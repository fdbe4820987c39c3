package routing

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Load factors of the sticky stage.
const (
	// DefaultLoadFactor is c in the bound ⌈c · (total + 1) / available⌉ when
	// neither the request nor Options name one: the factor of SGLang's
	// prefix_hash ring and Envoy's usual hash_balance_factor.
	DefaultLoadFactor = 1.25
	// MinLoadFactor is the least c accepted: below 1 no policy may be under
	// the bound.
	MinLoadFactor = 1.0
	// MaxLoadFactor is the largest c accepted; large factors are plain
	// consistent hashing.
	MaxLoadFactor = 1000.0
	// DefaultStickyWait is how long a session waits for its busy home
	// when its request names no wait: the serve command's --sticky-wait.
	// Chosen from policyrouter-rollout's oversubscribed runs (see
	// BENCHMARKS.md): long enough that a multi-turn episode finds its home
	// free again (a turn's generation takes about as long), short enough
	// that a home gone slow costs little. A freed slot goes to its home's
	// waiters first, else to the longest waiter not bound for its home
	// (waiterForLocked).
	DefaultStickyWait = 2 * time.Second
	// MaxSessionBytes is the longest session key accepted.
	MaxSessionBytes = 256
)

// The sticky stage composes with every router: a request that names a
// session is first offered to the session's home, a successor of the
// session key on a consistent-hashing ring (ring.go) over the candidates
// the router would consider. Only when there is no home, or the home
// cannot take the request, does the router decide. Requests without a
// session never reach this stage.
//
// For /assign the home is the first successor whose load is below
// ⌈c · (total + 1) / available⌉ (consistent hashing with bounded loads,
// Mirrokni, Thorup and Zadimoghaddam 2017): load is the tracked load plus
// leases out, or the caller's loads in stateless /assign. For /select the
// home is the first available successor; a busy home is waited for
// (sticky_wait) unless its queue of waiting sessions is at the same bound
// over waiting sessions (select_sticky.go).
//
// The candidates are all registered policies, except for routers that
// prefer the env worker's node (Router.EnvAffine): their ring holds the
// node's policies, falling back to the ring of all policies when the node
// has none or none of them can be the home.

// ringSet holds a snapshot's sticky rings, built on first use.
type ringSet struct {
	all    *hashRing
	byNode map[string]*hashRing
}

// stickyRings is the part of a Snapshot that the sticky stage reads.
type stickyRings struct {
	once  sync.Once
	rings ringSet
}

// rings returns the snapshot's rings, building them on first use: sessions
// cost nothing to deployments that do not use them.
func (s *Snapshot) rings() *ringSet {
	s.sticky.once.Do(func() {
		all := make([]int, len(s.policies))
		for pos := range s.policies {
			all[pos] = pos
		}
		s.sticky.rings.all = newRing(s.policies, all, "")
		s.sticky.rings.byNode = s.sticky.rings.all.split(func(pos int) string { return s.nodes[pos] })
	})
	return &s.sticky.rings
}

// ringsFor returns the rings a session is homed on, in the order to try:
// the env worker's node's ring for an env-affine router (when the node has
// policies), then the ring of all policies.
func (s *Snapshot) ringsFor(envNode string, affine bool) (first, fallback *hashRing) {
	rs := s.rings()
	if affine && envNode != "" {
		if r := rs.byNode[envNode]; r != nil && r != rs.all {
			return r, rs.all
		}
	}
	return rs.all, nil
}

// loadBound is ⌈c · (total + 1) / available⌉: a home's load must be below
// it.
func loadBound(c float64, total int64, available int) int64 {
	return int64(math.Ceil(c * float64(total+1) / float64(available)))
}

// home is the one homing rule of the sticky stage, for /select (and so
// the proxy) and /assign alike. It returns the home of the session hashed
// to h: its first successor that the ring's test accepts, on the env
// worker's node's ring first for an env-affine router, then on the ring of
// all policies. accept tests a policy as the home on a ring: /select
// accepts an available policy that passes the request's filter, /assign
// one whose load is also below the ring's bound. natural reports whether
// the home is the session's first successor of all; pos is -1 when no
// policy can be the home.
func (s *Snapshot) home(h uint64, envNode string, affine bool, accept func(r *hashRing, pos int) bool) (pos int, natural bool, ring *hashRing) {
	first, fallback := s.ringsFor(envNode, affine)
	if pos, natural = first.successor(h, func(p int) bool { return accept(first, p) }); pos >= 0 {
		return pos, natural, first
	}
	if fallback != nil {
		// The node's ring has no home: the session's natural home is lost.
		if pos, _ = fallback.successor(h, func(p int) bool { return accept(fallback, p) }); pos >= 0 {
			return pos, false, fallback
		}
	}
	return -1, false, nil
}

// StickyStats counts the requests, or /assign tasks, that named a session.
// Each counts once, in one of the three.
type StickyStats struct {
	// Hits went to the session's natural home: its first ring successor.
	Hits uint64
	// Spills found their home busy (/select) past sticky_wait_ms and went
	// where the router sent them; the home stays where it is.
	Spills uint64
	// Misses found their natural home unavailable (unhealthy, draining,
	// unknown) or at the load bound and went to the next successor, or to
	// the router when no policy could be a home.
	Misses uint64
}

// stickyCounters are the State's StickyStats, updated without the lock.
type stickyCounters struct {
	hits, spills, misses atomic.Uint64
}

func (c *stickyCounters) count(natural bool) {
	if natural {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
}

func (c *stickyCounters) stats() StickyStats {
	return StickyStats{Hits: c.hits.Load(), Spills: c.spills.Load(), Misses: c.misses.Load()}
}

// loadFactor returns c for a request that names lf (0: the default).
func (st *State) loadFactor(lf float64) float64 {
	if lf > 0 {
		return lf
	}
	return st.opts.LoadFactor
}

// CheckSession returns an *InputError naming field when key is too long to
// be a session key.
func CheckSession(field, key string) error {
	if len(key) > MaxSessionBytes {
		return inputErr(field, "must be at most %d bytes", MaxSessionBytes)
	}
	return nil
}

// CheckLoadFactor returns an *InputError naming field when c is not a load
// factor the sticky stage accepts (0 stands for the default).
func CheckLoadFactor(field string, c float64) error {
	if c != 0 && !(c >= MinLoadFactor && c <= MaxLoadFactor) {
		return inputErr(field, "must be between %g and %g", MinLoadFactor, MaxLoadFactor)
	}
	return nil
}

// envAffine reports whether the table marks the router holding sel or asg
// as preferring the env worker's node: the sticky stage then homes
// sessions on the node's ring.
func envAffine(sel Selector, asg Assigner) bool {
	for _, r := range routers {
		if (sel != nil && r.Select == sel) || (asg != nil && r.Assign == asg) {
			return r.EnvAffine
		}
	}
	return false
}

// The sticky stage's queue bound for /select, ⌈c · (waiting + 1) /
// available⌉, needs the number of sessions waiting for the homes of the
// ring it walks and the number of its available policies: of all
// policies, or of one node's. Summing them per request costs a pass over
// every policy (5 µs at 1,024), so the ledger keeps them up to date
// instead: every change of a policy's availability (fitLocked), of its
// waiters (Select, unwaitLocked) and of the registration (updateLocked)
// calls stickyLoadLocked, which moves the policy's contribution. Calling it when
// nothing changed is harmless. Until the first /select that names a
// session the ledger keeps nothing, so that deployments without sessions
// pay one branch per change.

// ringLoad is the sessions waiting for homes on one ring (total) and the
// number of its available policies.
type ringLoad struct {
	total int64
	n     int
}

// stickyContribution is what one policy adds to its rings' ringLoads.
type stickyContribution struct {
	on   bool   // counted: registered and available
	load int64  // sessions waiting for the policy, when on
	node string // the node ring it is counted in, when on
}

// stickyLoadLocked brings rt's contribution to the ledger's ring loads up
// to date. Caller must hold State.mu.
func (st *State) stickyLoadLocked(rt *policyRuntime) {
	if !st.stickyTracked {
		return
	}
	was := rt.stickyIn
	now := stickyContribution{on: !rt.removed && rt.available()}
	if now.on {
		now.load = int64(rt.homeWaiters.len)
		now.node = rt.node
	}
	if was == now {
		return
	}
	// Add first, then take away, so that a node's entry that stays is
	// never deleted and made again.
	if now.on {
		st.stickyAll.total += now.load
		st.stickyAll.n++
		if now.node != "" {
			nl := st.stickyNode[now.node]
			if nl == nil {
				nl = &ringLoad{}
				st.stickyNode[now.node] = nl
			}
			nl.total += now.load
			nl.n++
		}
	}
	if was.on {
		st.stickyAll.total -= was.load
		st.stickyAll.n--
		if was.node != "" {
			nl := st.stickyNode[was.node]
			nl.total -= was.load
			nl.n--
			if nl.n == 0 {
				delete(st.stickyNode, was.node)
			}
		}
	}
	rt.stickyIn = now
}

// ringLoadLocked returns the load of ring r as the ledger keeps it,
// starting to keep the ring loads on first use. Caller must hold State.mu.
func (st *State) ringLoadLocked(r *hashRing) ringLoad {
	if !st.stickyTracked {
		st.stickyTracked = true
		for _, rt := range st.ledger.snap.rts {
			st.stickyLoadLocked(rt)
		}
	}
	if r.node == "" {
		return st.stickyAll
	}
	if nl := st.stickyNode[r.node]; nl != nil {
		return *nl
	}
	return ringLoad{}
}
