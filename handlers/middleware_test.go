package handlers

import (
	"testing"

	"github.com/google/uuid"
)

func TestNewRequestID(t *testing.T) {
	seen := make(map[string]bool)
	for range 10000 {
		id := newRequestID()
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 4 || u.Variant() != uuid.RFC4122 || u.String() != id {
			t.Fatalf("newRequestID() = %q: not a version 4 UUID in canonical form (%v)", id, err)
		}
		if seen[id] {
			t.Fatalf("newRequestID() = %q twice", id)
		}
		seen[id] = true
	}
}
