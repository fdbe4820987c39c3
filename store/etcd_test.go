package store

import (
	"context"
	"errors"
	"testing"

	"github.com/policyrouter/policyrouter/routing"
)

// Two routers on one prefix: each sees the other's writes through its
// watch, and a write based on what one read before the other wrote is
// refused rather than lost.
func TestEtcdReplicasShareThePrefix(t *testing.T) {
	a := openEtcd(t, t.Name())
	b := openEtcd(t, t.Name())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := b.Watch(ctx)
	waitNotified(t, watch, "start")
	readByB := mustLoad(t, b).Revision

	rev, err := a.Apply(ctx, 0, Change{Put: []routing.Policy{testPolicy(0)}})
	if err != nil {
		t.Fatalf("a.Apply: %v", err)
	}
	waitNotified(t, watch, "a's write")
	if reg := mustLoad(t, b); reg.Revision != rev || len(reg.Policies) != 1 {
		t.Fatalf("b loads revision %d with %d policies, want %d with 1", reg.Revision, len(reg.Policies), rev)
	}
	if _, err := b.Apply(ctx, readByB, Change{Put: []routing.Policy{testPolicy(1)}}); !errors.Is(err, ErrStale) {
		t.Fatalf("b.Apply on the revision it read before a's write = %v, want ErrStale", err)
	}
	if _, err := b.Apply(ctx, rev, Change{Put: []routing.Policy{testPolicy(1)}}); err != nil {
		t.Fatalf("b.Apply on the current revision: %v", err)
	}
	wantPolicies(t, a, []routing.Policy{testPolicy(0), testPolicy(1)})
}
