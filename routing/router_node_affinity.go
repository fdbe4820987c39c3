package routing

// nodeAffinityAssigner is /assign's "node_affinity": each task goes to the
// least loaded candidate on its env worker's node, else the least loaded
// overall (the seed's NodeAffinityRouter). Without env ids it is
// leastLoadedAssigner.
type nodeAffinityAssigner struct{}

var _ Assigner = nodeAffinityAssigner{}

func (nodeAffinityAssigner) assign(in AffinityInput, numTasks int, envIDs []string) ([]int, error) {
	if len(envIDs) == 0 {
		return leastLoadedPositions(in.Loads, numTasks)
	}
	in.EnvIDs = envIDs
	return nodeAffinityPositions(in)
}
