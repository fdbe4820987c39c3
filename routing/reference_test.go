package routing

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// This file re-states the seed's routers as plainly as possible (linear
// scans, no heaps, no packed keys), for the property tests to compare the
// real code with, and generates the random inputs they run on.

// refParse is the seed's _parse_env_worker_index: int() of the text after
// the last '-'. It returns the value as a decimal string with leading zeros
// removed (it may be huge), or ok false where the seed gets None.
func refParse(envID string) (digits string, ok bool) {
	s := envID[strings.LastIndex(envID, "-")+1:]
	s = strings.TrimFunc(s, unicode.IsSpace)
	s = strings.TrimPrefix(s, "+")
	groups := strings.Split(s, "_")
	var b strings.Builder
	for _, g := range groups {
		if g == "" {
			return "", false
		}
		for _, r := range g {
			d, ok := refDigit(r)
			if !ok {
				return "", false
			}
			b.WriteByte(byte('0' + d))
		}
	}
	digits = strings.TrimLeft(b.String(), "0")
	if digits == "" {
		digits = "0"
	}
	return digits, true
}

// refZeros are the zero digits of the decimal digit sets the generator uses.
var refZeros = []rune{'0', '٠', '०', '০', '๐', '０', '𝟎', '𝟘', '𝟶'}

func refDigit(r rune) (int, bool) {
	for _, z := range refZeros {
		if r >= z && r < z+10 {
			return int(r - z), true
		}
	}
	if unicode.IsDigit(r) {
		panic(fmt.Sprintf("refDigit: digit %U is not in refZeros", r))
	}
	return 0, false
}

// refEnvNode is the seed's self._env_worker_to_node.get(worker): "" (None)
// for an unparsable env id or a worker on no node.
func refEnvNode(topo Topology, envID string) string {
	digits, ok := refParse(envID)
	if !ok {
		return ""
	}
	for node := range topo {
		for _, e := range topo.Env(node) {
			if strconv.Itoa(e) == digits {
				return node
			}
		}
	}
	return ""
}

// refArgmin is Python's min(candidates, key=loads.__getitem__): the first
// candidate with the smallest load.
func refArgmin(loads []int64, candidates []int) int {
	best := candidates[0]
	for _, c := range candidates[1:] {
		if loads[c] < loads[best] {
			best = c
		}
	}
	return best
}

// refSimple is SimpleRouter.assign. Picking the least (load, index) pair n
// times is an argmin over all positions each time.
func refSimple(loads []int64, n int) []int {
	loads = slices.Clone(loads)
	all := make([]int, len(loads))
	for i := range all {
		all[i] = i
	}
	out := []int{}
	for range n {
		i := refArgmin(loads, all)
		out = append(out, i)
		loads[i]++
	}
	return out
}

// refNodeAffinity is NodeAffinityRouter.assign over positions 0..len-1;
// policyNodes[i] is position i's node, "" for None.
func refNodeAffinity(topo Topology, policyNodes []string, loads []int64, n int, envIDs []string) []int {
	if !slices.ContainsFunc(policyNodes, func(s string) bool { return s != "" }) || len(envIDs) == 0 {
		// The seed tests `not self._policy_node_ids`; a list of Nones is
		// truthy but gives the same answers as SimpleRouter.
		return refSimple(loads, n)
	}
	loads = slices.Clone(loads)
	all := make([]int, len(loads))
	for i := range all {
		all[i] = i
	}
	out := []int{}
	for _, env := range envIDs {
		node := refEnvNode(topo, env)
		var candidates []int
		for i, pn := range policyNodes {
			if pn == node {
				candidates = append(candidates, i)
			}
		}
		if len(candidates) == 0 {
			candidates = all
		}
		i := refArgmin(loads, candidates)
		out = append(out, i)
		loads[i]++
	}
	return out
}

// refPolicyNode is a policy's node as the service defines it: its own node
// id, else the topology node whose eval ids hold its index.
func refPolicyNode(topo Topology, p Policy) string {
	if p.NodeID != "" {
		return p.NodeID
	}
	for node := range topo {
		if slices.Contains(topo.Eval(node), p.Index) {
			return node
		}
	}
	return ""
}

// refRoundRobin is SyncNodeAffinityRouter over policies 0..n-1.
type refRoundRobin struct {
	topo Topology
	n    int
	rr   map[string]int
	grr  int
}

func (r *refRoundRobin) selectPolicy(envID string) int {
	node := refEnvNode(r.topo, envID)
	if ps := r.topo.Eval(node); node != "" && len(ps) > 0 {
		p := ps[r.rr[node]%len(ps)]
		r.rr[node]++
		return p
	}
	p := r.grr % r.n
	r.grr++
	return p
}

// randCase is one random routing input: a registration, loads over indices
// 0..len(loads)-1 (a superset of the registered ones) and tasks.
type randCase struct {
	policies []Policy
	topo     Topology
	loads    []int64
	envIDs   []string
}

// genCase draws a random case. With dense set, every index of loads is
// registered (the seed's SyncNodeAffinityRouter needs that: its eval ids
// are list positions).
func genCase(r *rand.Rand, dense bool) randCase {
	p := 1 + r.IntN(12)
	if r.IntN(20) == 0 {
		p = 30 + r.IntN(100)
	}
	var c randCase
	for i := range p {
		if dense || r.IntN(4) != 0 {
			c.policies = append(c.policies, Policy{Index: i, ID: "id-" + strconv.Itoa(i)})
		}
	}
	numNodes := r.IntN(5)
	workers := 1 + r.IntN(2*p+2)
	c.topo = genTopology(r, c.policies, numNodes, workers)
	for i := range c.policies {
		// A few policies name their node themselves, possibly one the
		// topology does not know or another than their eval node.
		if r.IntN(6) == 0 {
			c.policies[i].NodeID = "n" + strconv.Itoa(r.IntN(numNodes+2))
		}
	}
	r.Shuffle(len(c.policies), func(i, j int) { c.policies[i], c.policies[j] = c.policies[j], c.policies[i] })
	c.loads = genLoads(r, p)
	n := r.IntN(3 * p)
	for range n {
		c.envIDs = append(c.envIDs, genEnvID(r, workers))
	}
	return c
}

// genTopology places some registered policies' indices and env workers
// 0..workers-1 on up to numNodes nodes, keeping the co-location rule.
func genTopology(r *rand.Rand, policies []Policy, numNodes, workers int) Topology {
	topo := Topology{}
	if numNodes == 0 || len(policies) == 0 {
		return topo
	}
	evals := make([]int, 0, len(policies))
	for _, p := range policies {
		if r.IntN(5) != 0 {
			evals = append(evals, p.Index)
		}
	}
	r.Shuffle(len(evals), func(i, j int) { evals[i], evals[j] = evals[j], evals[i] })
	var used []string
	for k := range numNodes {
		node := "n" + strconv.Itoa(k)
		take := 0
		if len(evals) > 0 {
			take = r.IntN(len(evals) + 1)
			if k == numNodes-1 {
				take = len(evals)
			}
		}
		var eval []int
		eval, evals = evals[:take], evals[take:]
		if len(eval) > 0 {
			topo[node] = map[string][]int{KindEval: eval}
			used = append(used, node)
		}
	}
	if len(used) == 0 {
		return topo
	}
	// Every used node gets one env worker; the rest are spread or left out.
	perm := r.Perm(workers)
	for i, node := range used {
		if i >= len(perm) {
			break
		}
		topo[node][KindEnv] = append(topo[node][KindEnv], perm[i])
	}
	for _, w := range perm[min(len(used), len(perm)):] {
		if r.IntN(4) == 0 {
			continue
		}
		node := used[r.IntN(len(used))]
		topo[node][KindEnv] = append(topo[node][KindEnv], w)
	}
	// Nodes whose only env worker was not drawn lose their eval workers'
	// partner: drop such nodes to keep the rule.
	for node := range topo {
		if len(topo.Env(node)) == 0 {
			delete(topo, node)
		}
	}
	return topo
}

func genLoads(r *rand.Rand, p int) []int64 {
	loads := make([]int64, p)
	spread := []int64{1, 3, 10, 1000}[r.IntN(4)]
	for i := range loads {
		loads[i] = r.Int64N(2*spread+1) - spread/2 // ties and negatives
		if r.IntN(50) == 0 {
			loads[i] = []int64{MaxLoad, -MaxLoad, 0}[r.IntN(3)]
		}
	}
	return loads
}

// genEnvID draws an env id: mostly "env-<worker>", some with a worker on no
// node, some malformed, some that only Python's int() reads.
func genEnvID(r *rand.Rand, workers int) string {
	w := r.IntN(workers + 3)
	ws := strconv.Itoa(w)
	switch r.IntN(24) {
	case 0:
		return []string{"env", "env-x", "env-", "", "-", "env-1__0", "env-_1", "env-1_", "env-+", "env-++1", "env-1.0", "env-0x1", "env-\x1c1", "env-\u200b1", "env-²"}[r.IntN(15)]
	case 1:
		return "env- " + ws + " "
	case 2:
		return "env-+" + ws
	case 3:
		return "env-00" + ws
	case 4:
		if len(ws) > 1 {
			return "env-" + ws[:1] + "_" + ws[1:]
		}
		return "env-0_" + ws
	case 5:
		var b strings.Builder
		b.WriteString("env-")
		zero := refZeros[r.IntN(len(refZeros))]
		for _, d := range ws {
			b.WriteRune(zero + (d - '0'))
		}
		return b.String()
	case 6:
		return "rollout-env-" + ws
	case 7:
		return ws
	case 8:
		return "env-\u00a0" + ws + "\t"
	case 9:
		return "env-" + strconv.Itoa(MaxIndex+w)
	case 10:
		return "env-" + ws + "x"
	default:
		return "env-" + ws
	}
}

// nodesOf returns the reference node of every index 0..n-1: the policy's
// node when registered, "" (None) when not.
func nodesOf(c randCase, n int) []string {
	out := make([]string, n)
	for _, p := range c.policies {
		if p.Index < n {
			out[p.Index] = refPolicyNode(c.topo, p)
		}
	}
	return out
}
