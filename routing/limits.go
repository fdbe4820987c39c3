package routing

// Bounds of the numbers and strings the routing requests (/select,
// /release, /assign) carry, stated once: the API's checks are built from
// them, and a test holds openapi.yaml to them.
const (
	// MaxEnvIDChars is the longest env worker id, in characters.
	MaxEnvIDChars = 256
	// MaxWaitMS bounds a request's waits (timeout_ms, sticky_wait_ms): an hour.
	MaxWaitMS = 3_600_000
	// MaxTTLMS bounds a lease's or a task's time to live (lease_ttl_ms,
	// assign_ttl_ms): a day.
	MaxTTLMS = 86_400_000
)

// The other bounds live beside what they bound: MaxIndex (topology.go),
// MaxTasks (assign.go), MaxSessionBytes, MinLoadFactor and MaxLoadFactor
// (sticky.go).
