package routing

import (
	"crypto/rand"
	"encoding/binary"

	"github.com/google/uuid"
)

// leaseCodec renders leases as UUIDs (RFC 9562 version 8, custom): the
// State's random 64-bit prefix, then the lease number. Ids from another
// State (another router process) or made up do not decode.
type leaseCodec struct{ prefix [8]byte }

func newLeaseCodec() leaseCodec {
	var c leaseCodec
	if _, err := rand.Read(c.prefix[:]); err != nil {
		panic("routing: no randomness for lease ids: " + err.Error())
	}
	return c
}

func (c leaseCodec) uuid(lease uint64) uuid.UUID {
	var u uuid.UUID
	copy(u[:8], c.prefix[:])
	binary.BigEndian.PutUint64(u[8:], lease)
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return u
}

// LeaseID renders a lease of this State as a UUID string.
func (st *State) LeaseID(lease uint64) string { return st.codec.uuid(lease).String() }

// ParseLeaseID returns the lease an id names: one from LeaseID, or an
// adopted lease's (Adopt) while it is out; false for any other id.
func (st *State) ParseLeaseID(id string) (uint64, bool) {
	if st.adoptedN.Load() == 0 {
		// No adopted lease out (the rule): no lock on /release's path.
		return st.codec.parse(id)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.parseLeaseIDLocked(id)
}

// parseLeaseIDLocked is ParseLeaseID. Caller must hold mu.
func (st *State) parseLeaseIDLocked(id string) (uint64, bool) {
	if lease, ok := st.adopted[id]; ok {
		return lease, true
	}
	return st.codec.parse(id)
}

// parse returns the lease an id from uuid names, and false for an id of
// another codec.
func (c leaseCodec) parse(id string) (uint64, bool) {
	u, err := uuid.Parse(id)
	if err != nil {
		return 0, false
	}
	lease := binary.BigEndian.Uint64(u[8:]) & (1<<62 - 1)
	if u != c.uuid(lease) {
		return 0, false
	}
	return lease, true
}
