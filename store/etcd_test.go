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

// A fenced PutUpdate writes only while the fence key stands, as created:
// a deposed leader cannot overwrite its successor's rolling update.
func TestEtcdFencedUpdates(t *testing.T) {
	s := openEtcd(t, t.Name())
	ctx := context.Background()
	key := s.Prefix() + "leader/a"
	put, err := s.Client().Put(ctx, key, "http://a")
	if err != nil {
		t.Fatal(err)
	}
	s.Fence(key, put.Header.Revision)
	if err := s.PutUpdate(ctx, "u1", []byte(`{"v":1}`)); err != nil {
		t.Fatalf("PutUpdate while the fence stands: %v", err)
	}
	if _, err := s.Client().Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Put(ctx, key, "http://b"); err != nil { // another term's key, same name
		t.Fatal(err)
	}
	if err := s.PutUpdate(ctx, "u1", []byte(`{"v":2}`)); !errors.Is(err, ErrFenced) {
		t.Fatalf("PutUpdate after the fence fell = %v, want ErrFenced", err)
	}
	if got := string(mustLoad(t, s).Updates["u1"]); got != `{"v":1}` {
		t.Errorf("stored update = %s, want the fenced write's predecessor", got)
	}
}
