package routing

// routeFilter keeps the policies whose engine serves the request's route
// (an SGLang-native /generate goes only to engines that have it). Which
// engine serves what is the engine table's to say: Options.Serves; without
// it every policy serves every route.
type routeFilter struct{}

var _ Filter = routeFilter{}

func (routeFilter) Keep(q Query, c Candidate) bool {
	return q.Route() == "" || q.ask.serves == nil || q.ask.serves(c.Policy(), q.ask.route)
}
