package settle

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"gatekeeper/internal/ride"
	"gatekeeper/proxy/internal/deadline"
	"gatekeeper/ratelimit"
	"gatekeeper/trajectory"
)

// Settles written behind the reply (store.settle_window, Redis only): a
// turn's charge leaves its request's path. The thread's next admission on
// this replica carries its settle in the same atomic update,
// so an agent's steady loop costs one round trip per turn; a flush every
// window writes what no admission took, the key and tenant settles with
// them. Until a settle lands, the call's reservation still holds its
// worst case on every budget of its chain and its tenant, so no budget is
// overrun; a crash loses only settles whose calls the restart's sweep
// reclaims, charged as estimated, with an event.

// maxBehind is how many settles wait at most before a flush starts
// without waiting out the window, and how many a flush writes at once.
const maxBehind = 64

// Pending is one turn's settle, computed when its reply ended, as the
// queue sees it: what it writes is its own.
type Pending interface {
	// Record is the thread record the settle writes.
	Record() string
	// Update is the settle as a store update's fn; evs receives its
	// events.
	Update(evs *[]trajectory.Event) func([]*trajectory.Record) ([]trajectory.Event, error)
	// Finish reports the outcome of Update's write, err and evs as the
	// store answered, retrying or logging what was not saved.
	Finish(ctx context.Context, evs []trajectory.Event, err error)
	// Write saves the settle in its own update, and Finishes it.
	Write(ctx context.Context)
	// Sides writes the key and tenant settles; HasSides reports that it
	// has any.
	Sides(ctx context.Context)
	HasSides() bool
	// Key is the settle of the call's key grant; its Grant is nil when
	// it has none.
	Key() ratelimit.Settlement
	// TenantSide reports a tenant ledger to settle; SettleTenant writes
	// it.
	TenantSide() bool
	SettleTenant(ctx context.Context)
}

// Behind holds the settles waiting to be written, by thread record, and
// the flush that writes them. Its goroutine is owned by its creator and
// stopped, after a last flush, by Close.
type Behind[P Pending] struct {
	window time.Duration
	store  trajectory.Store
	log    *slog.Logger

	mu      sync.Mutex
	byRec   map[string][]P
	order   []queued // when each record's settles began to wait, oldest first
	since   map[string]time.Time
	sides   []P       // key and tenant settles of settles an admission took
	sidesAt time.Time // since when the first of sides waits
	n       int
	urgent  bool                     // a settle an admission gave back waits: flush everything now
	writing map[string]chan struct{} // records a flush is writing, closed when done
	closed  bool

	kick chan struct{} // something waits: start the window
	full chan struct{} // maxBehind wait: flush now
	stop chan struct{}
	done chan struct{}
}

// NewBehind starts the flush of settles written to store after window.
func NewBehind[P Pending](window time.Duration, store trajectory.Store, log *slog.Logger) *Behind[P] {
	b := &Behind[P]{window: window, store: store, log: log, byRec: make(map[string][]P), since: make(map[string]time.Time),
		writing: make(map[string]chan struct{}), kick: make(chan struct{}, 1), full: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	go b.run()
	return b
}

// Window is how long a settle waits at most for an admission to take it.
func (b *Behind[P]) Window() time.Duration { return b.window }

// Add queues p; false when settles are written at once (no window, or the
// proxy is closing), and the caller writes it.
func (b *Behind[P]) Add(p P) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.queue(p)
	signal(b.kick)
	if b.n >= maxBehind {
		signal(b.full)
	}
	return true
}

// queued is a record with settles waiting since at.
type queued struct {
	id string
	at time.Time
}

// queue adds p to what waits; b.mu is held. An entry of order whose
// record's settles were taken since is stale, and skipped.
func (b *Behind[P]) queue(p P) {
	id := p.Record()
	if _, ok := b.byRec[id]; !ok {
		at := time.Now()
		b.since[id] = at
		b.order = append(b.order, queued{id: id, at: at})
	}
	b.byRec[id] = append(b.byRec[id], p)
	b.n++
}

// unqueue takes what waits for id; b.mu is held.
func (b *Behind[P]) unqueue(id string) []P {
	ps := b.byRec[id]
	delete(b.byRec, id)
	delete(b.since, id)
	b.n -= len(ps)
	return ps
}

// Take hands an admission on record id the settles waiting for it, which
// it then owes to its update (applied) or to giveBack; it first waits for
// a flush writing id, so that the admission never finds the record busy
// with a call whose reply has ended. That wait is bounded by Attempt:
// past it the admission goes on, and a record still busy forks a sibling
// thread rather than hold the agent.
func (b *Behind[P]) Take(ctx context.Context, id string) ([]P, error) {
	if b == nil {
		return nil, nil
	}
	var timeout <-chan time.Time
	for {
		b.mu.Lock()
		ch, busy := b.writing[id]
		if !busy {
			ps := b.unqueue(id)
			b.mu.Unlock()
			return ps, nil
		}
		b.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(Attempt)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-ch:
		case <-timeout:
			b.log.LogAttrs(ctx, slog.LevelWarn, "admission did not wait longer for the flush of its record's settles", slog.String("trajectory", id))
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Applied takes back, after an admission's update saved them, the
// settles whose key and tenant settles are still to be written.
func (b *Behind[P]) Applied(ps []P) {
	var rest []P
	for _, p := range ps {
		if p.HasSides() {
			rest = append(rest, p)
		}
	}
	if len(rest) == 0 {
		return
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.writeSides(rest...)
		return
	}
	if len(b.sides) == 0 {
		b.sidesAt = time.Now()
	}
	b.sides = append(b.sides, rest...)
	b.mu.Unlock()
	signal(b.kick)
}

// GiveBack returns settles an admission took but did not save (its update
// failed): the next flush writes them, at once.
func (b *Behind[P]) GiveBack(ps []P) {
	if len(ps) == 0 {
		return
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		for _, p := range ps {
			b.writeOne(p)
		}
		return
	}
	for _, p := range ps {
		b.queue(p)
	}
	b.urgent = true
	b.mu.Unlock()
	signal(b.full)
}

func (b *Behind[P]) run() {
	defer close(b.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		b.mu.Lock()
		next, waiting := time.Time{}, len(b.order) > 0 || len(b.sides) > 0
		if len(b.sides) > 0 {
			next = b.sidesAt.Add(b.window)
		}
		if len(b.order) > 0 && (next.IsZero() || b.order[0].at.Add(b.window).Before(next)) {
			next = b.order[0].at.Add(b.window)
		}
		b.mu.Unlock()
		if !waiting {
			select {
			case <-b.kick:
				continue
			case <-b.full:
			case <-b.stop:
				b.flush(true)
				return
			}
		} else {
			timer.Reset(max(time.Until(next), 0))
			select {
			case <-timer.C:
			case <-b.full:
				timer.Stop()
			case <-b.stop:
				timer.Stop()
				b.flush(true)
				return
			}
		}
		b.flush(false)
	}
}

// flush writes the settles that have waited a window (every one with
// all, or when maxBehind wait), maxBehind records at once, and the key
// and tenant settles left by admissions.
func (b *Behind[P]) flush(all bool) {
	for {
		b.mu.Lock()
		all = all || b.urgent || b.n >= maxBehind
		b.urgent = false
		now := time.Now()
		var sides []P
		if all || now.Sub(b.sidesAt) >= b.window {
			sides, b.sides = b.sides, nil
		}
		var recs []string
		var chs []chan struct{}
		var batch [][]P
		for len(b.order) > 0 && len(recs) < maxBehind {
			q := b.order[0]
			if !all && now.Sub(q.at) < b.window {
				break
			}
			b.order = b.order[1:]
			if at, ok := b.since[q.id]; !ok || !at.Equal(q.at) {
				continue // an admission took them
			}
			ch := make(chan struct{})
			b.writing[q.id] = ch
			recs, chs, batch = append(recs, q.id), append(chs, ch), append(batch, b.unqueue(q.id))
		}
		more := len(recs) == maxBehind
		b.mu.Unlock()
		if len(batch) == 0 && len(sides) == 0 {
			return
		}
		b.write(recs, chs, batch, sides)
		if !more {
			return
		}
	}
}

// write writes a flush's wave: the first settle of each record in one
// call to the store (one pipeline on Redis, see deadline.UpdateChains)
// and, concurrently, each tenant's charge and the later settles of a
// record that has several; the key settles of every settle in it ride in
// the first of those round trips (one of their own when none reaches
// Redis). chs[i] is closed once recs[i]'s settles are written.
func (b *Behind[P]) write(recs []string, chs []chan struct{}, batch [][]P, sides []P) {
	ctx, cancel := context.WithTimeout(context.Background(), Attempt)
	defer cancel()
	var keys []ratelimit.Settlement
	var tenants []P
	for _, p := range slices.Concat(slices.Concat(batch...), sides) {
		if st := p.Key(); st.Grant != nil {
			keys = append(keys, st)
		}
		if p.TenantSide() {
			tenants = append(tenants, p)
		}
	}
	// The key settles ride in the first round trip the wave makes to the
	// store's Redis (a tenant's charge or the records' pipeline); Finish
	// reads them, or sends them when none carried them.
	sr := ratelimit.RideSettles(keys)
	rctx := ctx
	if sr != nil {
		rctx = ride.With(ctx, sr)
	}
	defer sr.Finish(ctx)
	var wg sync.WaitGroup
	for _, p := range tenants {
		wg.Go(func() { p.SettleTenant(rctx) })
	}
	if len(batch) > 0 {
		ids := make([]string, len(batch))
		fns := make([]func([]*trajectory.Record) ([]trajectory.Event, error), len(batch))
		evs := make([][]trajectory.Event, len(batch))
		for i, ps := range batch {
			ids[i], fns[i] = recs[i], ps[0].Update(&evs[i])
		}
		errs := deadline.UpdateChains(rctx, b.store, ids, fns)
		for i, ps := range batch {
			ps[0].Finish(ctx, evs[i], errs[i])
			wg.Go(func() {
				for _, p := range ps[1:] {
					p.Write(ctx)
				}
				b.mu.Lock()
				delete(b.writing, recs[i])
				b.mu.Unlock()
				close(chs[i])
			})
		}
	}
	wg.Wait()
}

// writeOne writes a settle at once, with a context that outlives the
// request, as finish does.
func (b *Behind[P]) writeOne(p P) {
	ctx, cancel := context.WithTimeout(context.Background(), Attempt)
	defer cancel()
	p.Sides(ctx)
	p.Write(ctx)
}

// writeSides writes the key and tenant settles of each of ps.
func (b *Behind[P]) writeSides(ps ...P) {
	for _, p := range ps {
		ctx, cancel := context.WithTimeout(context.Background(), Attempt)
		p.Sides(ctx)
		cancel()
	}
}

// Close writes what waits and stops the flush; later settles are
// written at once. It waits until ctx ends at most.
func (b *Behind[P]) Close(ctx context.Context) {
	if b == nil {
		return
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	b.mu.Unlock()
	close(b.stop)
	select {
	case <-b.done:
	case <-ctx.Done():
		// Each settle still unwritten logs its figures should it fail;
		// the restart's sweep reclaims its call.
		b.log.LogAttrs(ctx, slog.LevelError, "shutdown grace ended with settles still being written")
	}
}

// signal wakes ch's reader without blocking: one wake-up is enough.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
