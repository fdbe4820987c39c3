package routing

// leastLoadedAssigner is /assign's "simple": each task goes to the least
// loaded candidate, ties to the lowest index, its load raised by one after
// each pick (the seed's SimpleRouter).
type leastLoadedAssigner struct{}

var _ Assigner = leastLoadedAssigner{}

func (leastLoadedAssigner) assign(in AffinityInput, numTasks int, _ []string) ([]int, error) {
	return leastLoadedPositions(in.Loads, numTasks)
}
