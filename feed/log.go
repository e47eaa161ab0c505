package feed

import (
	"context"
	"sort"
	"sync"
	"time"
)

// raw is one stored entry: its id and its event, either decoded (ev,
// when ok) or as the log stored it (b), to be decoded only for a
// subscriber.
type raw struct {
	id ID
	ev Event
	ok bool
	b  []byte
}

// eventLog keeps the latest events, in order. store: memoryLog for one
// process, redisLog for replicas.
type eventLog interface {
	// append stores events; the log assigns their ids. A log in another
	// process waits at most appendTimeout for one append.
	append(ctx context.Context, evs []Event) error
	// last is the id of the newest entry, zero when there is none.
	last(ctx context.Context) (ID, error)
	// read returns up to limit entries after after, oldest first; gap
	// reports that entries after after were already trimmed away.
	read(ctx context.Context, after ID, limit int) (rs []raw, gap bool, err error)
	// wait is read without the gap, blocking (up to about a second, or
	// until ctx ends) while there is nothing after after.
	wait(ctx context.Context, after ID, limit int) ([]raw, error)
}

// memoryLog is the log of one process: the newest retain events, kept as
// they were published (nothing is encoded or decoded in one process) in
// a ring, so that an append costs the same however full the log is.
type memoryLog struct {
	now    func() time.Time
	retain int

	mu      sync.Mutex
	rs      []raw // the ring: grows to retain, then wraps
	head    int   // the oldest entry's index once the ring is full
	newest  ID
	trimmed ID            // the newest id dropped by the cap
	changed chan struct{} // closed, and replaced, by every append
}

var _ eventLog = (*memoryLog)(nil)

func newMemoryLog(now func() time.Time, retain int) *memoryLog {
	return &memoryLog{now: now, retain: retain, changed: make(chan struct{})}
}

func (l *memoryLog) append(_ context.Context, evs []Event) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range evs {
		// Redis's rule: milliseconds of the clock, never going back.
		id := ID{Ms: uint64(l.now().UnixMilli())}
		if !l.newest.Less(id) {
			id = ID{Ms: l.newest.Ms, Seq: l.newest.Seq + 1}
		}
		l.newest = id
		e.id, e.ID = id, id.String()
		r := raw{id: id, ev: e, ok: true}
		if len(l.rs) < l.retain {
			l.rs = append(l.rs, r)
			continue
		}
		l.trimmed = l.rs[l.head].id
		l.rs[l.head] = r
		l.head = (l.head + 1) % len(l.rs)
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return nil
}

// at is the i-th oldest entry; the caller holds mu.
func (l *memoryLog) at(i int) *raw { return &l.rs[(l.head+i)%len(l.rs)] }

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
	n := len(l.rs)
	i := sort.Search(n, func(i int) bool { return after.Less(l.at(i).id) })
	k := min(n-i, limit)
	if k == 0 {
		return nil, l.changed
	}
	out := make([]raw, k)
	for j := range out {
		out[j] = *l.at(i + j)
	}
	return out, l.changed
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
