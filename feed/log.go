package feed

import (
	"context"
	"sort"
	"sync"
	"time"
)

// raw is one stored entry: its id and its encoded event.
type raw struct {
	id ID
	b  []byte
}

// eventLog keeps the latest events, in order. store: memoryLog for one
// process, redisLog for replicas.
type eventLog interface {
	// append stores entries; the log assigns their ids.
	append(ctx context.Context, entries [][]byte) error
	// last is the id of the newest entry, zero when there is none.
	last(ctx context.Context) (ID, error)
	// read returns up to limit entries after after, oldest first; gap
	// reports that entries after after were already trimmed away.
	read(ctx context.Context, after ID, limit int) (rs []raw, gap bool, err error)
	// wait is read without the gap, blocking (up to about a second, or
	// until ctx ends) while there is nothing after after.
	wait(ctx context.Context, after ID, limit int) ([]raw, error)
}

// memoryLog is the log of one process: the newest retain entries.
type memoryLog struct {
	now    func() time.Time
	retain int

	mu      sync.Mutex
	rs      []raw // oldest first
	newest  ID
	trimmed ID            // the newest id dropped by the cap
	changed chan struct{} // closed, and replaced, by every append
}

var _ eventLog = (*memoryLog)(nil)

func newMemoryLog(now func() time.Time, retain int) *memoryLog {
	return &memoryLog{now: now, retain: retain, changed: make(chan struct{})}
}

func (l *memoryLog) append(_ context.Context, entries [][]byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range entries {
		// Redis's rule: milliseconds of the clock, never going back.
		id := ID{Ms: uint64(l.now().UnixMilli())}
		if !l.newest.Less(id) {
			id = ID{Ms: l.newest.Ms, Seq: l.newest.Seq + 1}
		}
		l.newest = id
		l.rs = append(l.rs, raw{id: id, b: b})
	}
	if over := len(l.rs) - l.retain; over > 0 {
		l.trimmed = l.rs[over-1].id
		l.rs = append(l.rs[:0:0], l.rs[over:]...)
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return nil
}

func (l *memoryLog) last(context.Context) (ID, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.newest, nil
}

func (l *memoryLog) read(_ context.Context, after ID, limit int) ([]raw, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rs, _ := l.after(after, limit)
	return rs, after.Less(l.trimmed), nil
}

// after is read under the lock; it also returns the channel the next
// append closes.
func (l *memoryLog) after(after ID, limit int) ([]raw, <-chan struct{}) {
	i := sort.Search(len(l.rs), func(i int) bool { return after.Less(l.rs[i].id) })
	n := min(len(l.rs)-i, limit)
	return append([]raw(nil), l.rs[i:i+n]...), l.changed
}

func (l *memoryLog) wait(ctx context.Context, after ID, limit int) ([]raw, error) {
	l.mu.Lock()
	rs, changed := l.after(after, limit)
	l.mu.Unlock()
	if len(rs) > 0 {
		return rs, nil
	}
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-changed:
	case <-t.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	rs, _ = l.after(after, limit)
	return rs, nil
}
