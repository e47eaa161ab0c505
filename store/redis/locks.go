package redis

import (
	"context"
	"sync"
)

// treeLocks lets one update per tree run at a time in this process. Every
// update of a chain writes its root, so two at once in one process would
// only make one of them lose its compare-and-set and pay a second round
// trip; queued, each finds the cache as the previous one left it. Across
// processes the update script's version check still decides.
type treeLocks struct {
	mu   sync.Mutex
	held map[string]*treeLock
}

type treeLock struct {
	sem   chan struct{}
	users int // holding or waiting; the lock is dropped at zero
}

func newTreeLocks() *treeLocks { return &treeLocks{held: make(map[string]*treeLock)} }

// lock waits for the tree's lock or for ctx to end. The map only holds
// trees with a holder or a waiter, so it stays as small as the
// concurrency.
func (l *treeLocks) lock(ctx context.Context, root string) (unlock func(), err error) {
	l.mu.Lock()
	k, ok := l.held[root]
	if !ok {
		k = &treeLock{sem: make(chan struct{}, 1)}
		l.held[root] = k
	}
	k.users++
	l.mu.Unlock()

	select {
	case k.sem <- struct{}{}:
		return func() {
			<-k.sem
			l.leave(root, k)
		}, nil
	case <-ctx.Done():
		l.leave(root, k)
		return nil, ctx.Err()
	}
}

func (l *treeLocks) leave(root string, k *treeLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k.users--; k.users == 0 {
		delete(l.held, root)
	}
}

func (l *treeLocks) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}
