package store

import (
	"context"
	"sync"
)

// notifier tells the watchers of a store in this process that it changed:
// the Watch of the stores whose only writer is this process.
type notifier struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

// watch implements Store.Watch.
func (n *notifier) watch(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	ch <- struct{}{}
	n.mu.Lock()
	if n.subs == nil {
		n.subs = make(map[chan struct{}]struct{})
	}
	n.subs[ch] = struct{}{}
	n.mu.Unlock()
	context.AfterFunc(ctx, func() {
		n.mu.Lock()
		delete(n.subs, ch)
		n.mu.Unlock()
	})
	return ch
}

// notify wakes every watcher; a watcher not yet woken by the last call
// gets one wake-up for both.
func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.subs {
		wake(ch)
	}
}

// wake sends a notification on ch, a channel of capacity 1, unless one is
// pending already: notifications coalesce.
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
