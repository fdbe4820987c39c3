package fakepolicy

// Freeze stops the policy's work where it is, as an in-place pause does
// (freeze.go): its streams make no progress and new work waits, until
// Thaw. A test holds requests in flight with it for as long as it looks at
// them, instead of racing their end.
func (p *Policy) Freeze() { p.freeze() }

// Thaw ends a Freeze: the work goes on from where it stopped.
func (p *Policy) Thaw() { p.thaw() }
