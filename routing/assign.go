package routing

import (
	"errors"
	"fmt"
	"slices"
)

// Limits on the numbers the assignment algorithms accept. A heap key packs
// (load, index) into one uint64, so a load, increased by every task of one
// request, must stay inside 31 bits.
const (
	MaxLoad  = 1 << 29 // |load| of one policy
	MaxTasks = 1 << 20 // tasks in one assignment
)

// ErrNoPolicies is returned when there is no policy to route to: an empty
// load vector, or every policy unavailable. The seed raises
// ValueError("No policies available for routing") for the first case.
var ErrNoPolicies = errors.New("no policies available")

// ErrNoFreshPolicy is returned by Assign when policies are available but
// none meets the request's weight-version floor.
var ErrNoFreshPolicy = errors.New("no available policy has a fresh enough weight version")

// ErrAllUnavailable is returned when policies are registered but none passes
// the availability filter: every one is unhealthy, draining or not yet
// heard from. Waiting for a busy policy cannot help then, so Select answers
// at once.
var ErrAllUnavailable = errors.New("every policy is unhealthy, draining or not yet heard from")

// ErrAllExcluded is a Select whose exclusions (SelectRequest.Exclude: the
// policies a proxied request already failed on) leave no policy that is,
// or may soon be, available. It is an ErrAllUnavailable.
var ErrAllExcluded = fmt.Errorf("%w, or excluded: every policy this request may use was tried already", ErrAllUnavailable)

// LeastLoaded returns the seed's SimpleRouter.assign(loads, n): for each of n
// tasks the index of the least-loaded policy, ties to the lowest index, with
// that policy's load raised by one after each pick. loads is not modified.
// It returns ErrNoPolicies for an empty loads and an *InputError for n or a
// load outside the limits.
func LeastLoaded(loads []int64, n int) ([]int, error) {
	return leastLoadedPositions(loads, n)
}

func checkAssignInput(loads []int64, n int) error {
	if n < 0 || n > MaxTasks {
		return inputErr("num_tasks", "must be between 0 and %d", MaxTasks)
	}
	if len(loads) == 0 {
		return ErrNoPolicies
	}
	if len(loads) > MaxIndex {
		return inputErr("current_loads", "must have at most %d entries", MaxIndex)
	}
	for _, l := range loads {
		if l < -MaxLoad || l > MaxLoad {
			return inputErr("current_loads", "each load must be between %d and %d", -MaxLoad, MaxLoad)
		}
	}
	return nil
}

// AffinityInput is one node-affinity assignment over a set of candidate
// policies.
type AffinityInput struct {
	// Indices are the candidate policies' indices in ascending order, Loads
	// their loads and Nodes their node ids ("" for none), all of one length.
	Indices []int
	Loads   []int64
	Nodes   []string
	// EnvNode maps an env worker index to its node (the topology's env ids).
	EnvNode map[int]string
	// EnvIDs are the tasks, one per env id.
	EnvIDs []string
}

// NodeAffinity returns the seed's NodeAffinityRouter.assign for the given
// candidates: for each env id in order, the least-loaded candidate on the
// env worker's node (ties to the lowest index), or the least-loaded of all
// when that node has none; the chosen load grows by one. As in the seed, an
// env id whose worker has no node matches the candidates that have no node.
// When no candidate has a node the seed falls back to SimpleRouter, which
// gives the same answer as the loop above. Answers are indices, not
// positions.
func NodeAffinity(in AffinityInput) ([]int, error) {
	if len(in.Loads) != len(in.Indices) || len(in.Nodes) != len(in.Indices) {
		return nil, inputErr("current_loads", "has %d entries for %d policies", len(in.Loads), len(in.Indices))
	}
	out, err := nodeAffinityPositions(in)
	if err != nil {
		return nil, err
	}
	for i, pos := range out {
		out[i] = in.Indices[pos]
	}
	return out, nil
}

// nodeAffinityPositions is NodeAffinity answering positions in in rather
// than indices. in.Indices is not used.
func nodeAffinityPositions(in AffinityInput) ([]int, error) {
	if err := checkAssignInput(in.Loads, len(in.EnvIDs)); err != nil {
		return nil, err
	}
	if len(in.EnvIDs) <= scanTasks {
		return nodeAffinityScan(in), nil
	}
	s := getScratch(0)
	defer putScratch(s)
	return nodeAffinityPos(s, in), nil
}

// scanTasks is the most tasks for which NodeAffinity scans the candidates
// per task, as the seed does, instead of building heaps: building them
// costs a pass over every policy, which a few tasks never win back.
const scanTasks = 8

// nodeAffinityScan is the seed's NodeAffinityRouter loop itself: per env
// id, the least (load, position) among the candidates on the env worker's
// node, else among all. It returns positions.
func nodeAffinityScan(in AffinityInput) []int {
	// The loads this call has raised, at most one per task: in.Loads is the
	// caller's and stays as it is.
	var buf [scanTasks]raisedLoad
	raised := buf[:0]
	load := func(pos int) int64 {
		for _, r := range raised {
			if r.pos == pos {
				return r.load
			}
		}
		return in.Loads[pos]
	}
	out := make([]int, 0, len(in.EnvIDs))
	for _, env := range in.EnvIDs {
		node := ""
		if w, ok := ParseEnvWorker(env); ok {
			node = in.EnvNode[w]
		}
		best, bestLoad := -1, int64(0)
		for pos, n := range in.Nodes {
			if n != node {
				continue
			}
			if l := load(pos); best < 0 || l < bestLoad {
				best, bestLoad = pos, l
			}
		}
		if best < 0 {
			for pos := range in.Nodes {
				if l := load(pos); best < 0 || l < bestLoad {
					best, bestLoad = pos, l
				}
			}
		}
		out = append(out, best)
		if i := slices.IndexFunc(raised, func(r raisedLoad) bool { return r.pos == best }); i >= 0 {
			raised[i].load++
		} else {
			raised = append(raised, raisedLoad{best, bestLoad + 1})
		}
	}
	return out
}

type raisedLoad struct {
	pos  int
	load int64
}

// nodeAffinityPos is NodeAffinity on checked input, answering positions.
//
// Each node's candidates form one min-heap of packed (load, position) keys
// ("" for the candidates with no node). Every position is in exactly one
// heap, so the least loaded candidate of all is the least of the heap
// roots, which a tournament tree over the groups' roots gives. A pick
// always takes the root of one group: it grows and sinks in its group. The
// tree is brought up to date only when a task falls back to the least
// loaded of all, replaying the paths of the groups changed since.
func nodeAffinityPos(s *scratch, in AffinityInput) []int {
	groupOf := make(map[string]int32)
	s.groups = s.groups[:0]
	s.groupAt = grow(s.groupAt, len(in.Nodes))
	lastNode, lastGroup := "", int32(-1)
	for pos, node := range in.Nodes {
		g := lastGroup
		if g < 0 || node != lastNode {
			var ok bool
			if g, ok = groupOf[node]; !ok {
				g = int32(len(s.groups))
				groupOf[node] = g
				if len(s.groups) < cap(s.groups) {
					s.groups = s.groups[:g+1]
					s.groups[g] = s.groups[g][:0]
				} else {
					s.groups = append(s.groups, nil)
				}
			}
			lastNode, lastGroup = node, g
		}
		s.groups[g] = append(s.groups[g], packKey(in.Loads[pos], pos))
		s.groupAt[pos] = g
	}
	leaves := 1
	for leaves < len(s.groups) {
		leaves *= 2
	}
	tree := grow(s.tree, 2*leaves)
	s.tree = tree
	for g := range leaves {
		tree[leaves+g] = ^uint64(0)
		if g < len(s.groups) {
			heapify(s.groups[g])
			tree[leaves+g] = s.groups[g][0]
		}
	}
	for i := leaves - 1; i >= 1; i-- {
		tree[i] = min(tree[2*i], tree[2*i+1])
	}
	s.dirty = s.dirty[:0]
	s.isDirty = grow(s.isDirty, len(s.groups))
	clear(s.isDirty)

	// The group serving an env worker, -1 when its node has no candidate
	// (then the least loaded of all serves it). Workers with small numbers
	// are looked up once and remembered in s.workers (-2: not yet).
	group := func(node string) int32 {
		if g, ok := groupOf[node]; ok {
			return g
		}
		return -1
	}
	noNode := group("")
	limit := 2*len(in.EnvIDs) + 64
	s.workers = s.workers[:0]

	out := make([]int, 0, len(in.EnvIDs))
	for _, env := range in.EnvIDs {
		g := noNode
		if w, ok := ParseEnvWorker(env); ok {
			switch {
			case w >= limit:
				g = group(in.EnvNode[w])
			case w < len(s.workers) && s.workers[w] != -2:
				g = s.workers[w]
			default:
				for len(s.workers) <= w {
					s.workers = append(s.workers, -2)
				}
				g = group(in.EnvNode[w])
				s.workers[w] = g
			}
		}
		if g < 0 {
			// Bring the tree up to date, then take the least root.
			for _, d := range s.dirty {
				i := leaves + int(d)
				tree[i] = s.groups[d][0]
				for i > 1 {
					i /= 2
					tree[i] = min(tree[2*i], tree[2*i+1])
				}
				s.isDirty[d] = false
			}
			s.dirty = s.dirty[:0]
			g = s.groupAt[keyIndex(tree[1])]
		}
		h := s.groups[g]
		out = append(out, keyIndex(h[0]))
		h[0] += keyInc
		siftDown(h, 0)
		// The tree is only read by fallbacks: note the change for the next
		// one instead of replaying the path now.
		if !s.isDirty[g] {
			s.isDirty[g] = true
			s.dirty = append(s.dirty, g)
		}
	}
	return out
}
