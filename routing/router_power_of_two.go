package routing

import "math/rand/v2"

// powerOfTwo is "power_of_two", the power of two choices (Mitzenmacher
// 2001; SGLang Model Gateway's power_of_two policy): two candidates drawn
// at random, the less loaded one wins, ties to the lower index. For
// /assign each task draws afresh over the candidates' loads, raised by one
// per task placed; for /select the candidates are the policies with an
// idle slot that meet the floor, and load is leases out plus tracked load.
// It keeps no state but its random source. It is used by pointer: the
// table's routers are compared by identity, and a func field makes the
// struct uncomparable.
type powerOfTwo struct {
	// intN draws in [0, n); nil is math/rand/v2's IntN (safe for
	// concurrent use). Tests set a seeded one.
	intN func(n int) int
}

var (
	_ Assigner = (*powerOfTwo)(nil)
	_ Selector = (*powerOfTwo)(nil)
)

func (r *powerOfTwo) draw(n int) int {
	if r.intN != nil {
		return r.intN(n)
	}
	return rand.IntN(n)
}

// two returns two distinct positions in [0, n), or the same one when n is 1.
func (r *powerOfTwo) two(n int) (a, b int) {
	a = r.draw(n)
	if n == 1 {
		return a, a
	}
	b = r.draw(n - 1)
	if b >= a {
		b++
	}
	return a, b
}

func (r *powerOfTwo) assign(in AffinityInput, numTasks int, _ []string) ([]int, error) {
	if err := checkAssignInput(in.Loads, numTasks); err != nil {
		return nil, err
	}
	loads := make([]int64, len(in.Loads))
	copy(loads, in.Loads)
	out := make([]int, numTasks)
	for t := range out {
		a, b := r.two(len(loads))
		if loads[b] < loads[a] || (loads[b] == loads[a] && b < a) {
			a = b
		}
		out[t] = a
		loads[a]++
	}
	return out, nil
}

// pick samples two of the policies that have an idle slot and pass the
// filters, in one pass and without allocating (reservoir sampling of two);
// load is leases out plus tracked load.
func (r *powerOfTwo) pick(v View) (Choice, bool) {
	var first, second Idle
	seen := 0
	v.EachIdle(func(i Idle) bool {
		seen++
		switch {
		case seen == 1:
			first = i
		case seen == 2:
			second = i
		default:
			if j := r.draw(seen); j == 0 {
				first = i
			} else if j == 1 {
				second = i
			}
		}
		return true
	})
	if seen == 0 {
		return Choice{}, false
	}
	win := first
	if seen > 1 {
		la, lb := first.Load(), second.Load()
		if lb < la || (lb == la && second.Policy().Index < first.Policy().Index) {
			win = second
		}
	}
	return Lease(win), true
}

func (*powerOfTwo) leases() bool { return true }
