package proxy

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"gatekeeper/internal/ride"
	"gatekeeper/meter"
	"gatekeeper/ratelimit"
	"gatekeeper/trajectory"
)

// Settles written behind the reply (store.settle_window, Redis only): a
// turn's charge leaves its request's path. The thread's next admission on
// this replica carries its settle in the same atomic update (admitWaiting),
// so an agent's steady loop costs one round trip per turn; a flush every
// window writes what no admission took, the key and tenant settles with
// them. Until a settle lands, the call's reservation still holds its
// worst case on every budget of its chain and its tenant, so no budget is
// overrun; a crash loses only settles whose calls the restart's sweep
// reclaims, charged as estimated, with an event (sweeper.go).

// maxBehind is how many settles wait at most before a flush starts
// without waiting out the window, and how many a flush writes at once.
const maxBehind = 64

// pendingSettle is one turn's settle, computed when its reply ended.
type pendingSettle struct {
	t      *turn
	o      outcome
	charge meter.Charge
	data   map[string]any
	now    time.Time
	attrs  []slog.Attr
}

// apply is the settle's step on the turn's chain, inside a store update.
func (p *pendingSettle) apply(chain []*trajectory.Record) ([]trajectory.Event, error) {
	return p.t.settleChain(chain, p.o, p.charge, p.data, p.now)
}

// sides settles the turn's key grant and its tenant's ledger.
func (p *pendingSettle) sides(ctx context.Context) {
	p.t.settleKey(ctx, p.o)
	p.t.settleTenant(ctx, p.charge, p.o)
}

// tenantSide reports a settle with a tenant ledger to settle.
func (p *pendingSettle) tenantSide() bool {
	return p.t.s.ledger != nil && limitsOf(p.t.req.tenant).Spends()
}

// hasSides reports a settle with a key grant or a tenant ledger to settle.
func (p *pendingSettle) hasSides() bool {
	return p.t.grant.Load() != nil || p.tenantSide()
}

// write saves the settle in its own update.
func (p *pendingSettle) write(ctx context.Context) {
	p.wrote(ctx, p.save(ctx))
}

// save writes the settle in its own update: what write and its retries
// send.
func (p *pendingSettle) save(ctx context.Context) error {
	var evs []trajectory.Event
	_, err := p.t.s.store.UpdateChain(ctx, p.t.recID, p.update(&evs))
	return p.saved(evs, err)
}

// update is the settle as a store update's fn; evs receives its events.
func (p *pendingSettle) update(evs *[]trajectory.Event) func([]*trajectory.Record) ([]trajectory.Event, error) {
	return func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		var err error
		*evs, err = p.apply(chain)
		return *evs, err
	}
}

// saved is what an update's err says of the settle: nil when it was
// saved (its events are observed) or an earlier attempt, whose answer was
// lost, saved it.
func (p *pendingSettle) saved(evs []trajectory.Event, err error) error {
	if errors.Is(err, errSettled) {
		return nil
	}
	if err == nil {
		p.t.observe(evs)
	}
	return err
}

// wrote logs a settle that was saved; one the store could not take (it
// is out) is retried in the background, any other failure logged with
// the figures.
func (p *pendingSettle) wrote(ctx context.Context, err error) {
	t := p.t
	if err != nil {
		if errors.Is(err, trajectory.ErrUnavailable) {
			// The reply went out; its charge must not be lost.
			t.s.settles.retry(t.log, writeCharge, p.save, p.attrs)
			return
		}
		p.lost(ctx, err)
		return
	}
	t.log.LogAttrs(ctx, slog.LevelInfo, "turn", p.attrs...)
}

// done reports a settle that an admission's update applied (err nil) or
// found already applied or gone.
func (p *pendingSettle) done(ctx context.Context, evs []trajectory.Event, err error) {
	switch {
	case err == nil:
		p.t.observe(evs)
		p.t.log.LogAttrs(ctx, slog.LevelInfo, "turn", p.attrs...)
	case errors.Is(err, errSettled):
	default:
		p.lost(ctx, err)
	}
}

func (p *pendingSettle) lost(ctx context.Context, err error) {
	p.t.log.LogAttrs(ctx, slog.LevelError, "charge not recorded", append(p.attrs, slog.String("error", err.Error()))...)
}

// behind holds the settles waiting to be written, by thread record, and
// the flush that writes them. Its goroutine is owned by the Server and
// stopped, after a last flush, by close.
type behind struct {
	window time.Duration
	log    *slog.Logger

	mu      sync.Mutex
	byRec   map[string][]*pendingSettle
	order   []queued // when each record's settles began to wait, oldest first
	since   map[string]time.Time
	sides   []*pendingSettle // key and tenant settles of settles an admission took
	sidesAt time.Time        // since when the first of sides waits
	n       int
	urgent  bool                     // a settle an admission gave back waits: flush everything now
	writing map[string]chan struct{} // records a flush is writing, closed when done
	closed  bool

	kick chan struct{} // something waits: start the window
	full chan struct{} // maxBehind wait: flush now
	stop chan struct{}
	done chan struct{}
}

func newBehind(window time.Duration, log *slog.Logger) *behind {
	b := &behind{window: window, log: log, byRec: make(map[string][]*pendingSettle), since: make(map[string]time.Time),
		writing: make(map[string]chan struct{}), kick: make(chan struct{}, 1), full: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	go b.run()
	return b
}

// add queues p; false when settles are written at once (no window, or the
// proxy is closing), and the caller writes it.
func (b *behind) add(p *pendingSettle) bool {
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
func (b *behind) queue(p *pendingSettle) {
	id := p.t.recID
	if _, ok := b.byRec[id]; !ok {
		at := time.Now()
		b.since[id] = at
		b.order = append(b.order, queued{id: id, at: at})
	}
	b.byRec[id] = append(b.byRec[id], p)
	b.n++
}

// unqueue takes what waits for id; b.mu is held.
func (b *behind) unqueue(id string) []*pendingSettle {
	ps := b.byRec[id]
	delete(b.byRec, id)
	delete(b.since, id)
	b.n -= len(ps)
	return ps
}

// take hands an admission on record id the settles waiting for it, which
// it then owes to its update (applied) or to giveBack; it first waits for
// a flush writing id, so that the admission never finds the record busy
// with a call whose reply has ended. That wait is bounded by settleAttempt:
// past it the admission goes on, and a record still busy forks a sibling
// thread rather than hold the agent.
func (b *behind) take(ctx context.Context, id string) ([]*pendingSettle, error) {
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
			t := time.NewTimer(settleAttempt)
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

// applied takes back, after an admission's update saved them, the
// settles whose key and tenant settles are still to be written.
func (b *behind) applied(ps []*pendingSettle) {
	var rest []*pendingSettle
	for _, p := range ps {
		if p.hasSides() {
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

// giveBack returns settles an admission took but did not save (its update
// failed): the next flush writes them, at once.
func (b *behind) giveBack(ps []*pendingSettle) {
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

func (b *behind) run() {
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
func (b *behind) flush(all bool) {
	for {
		b.mu.Lock()
		all = all || b.urgent || b.n >= maxBehind
		b.urgent = false
		now := time.Now()
		var sides []*pendingSettle
		if all || now.Sub(b.sidesAt) >= b.window {
			sides, b.sides = b.sides, nil
		}
		var recs []string
		var chs []chan struct{}
		var batch [][]*pendingSettle
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
// call to the store (one pipeline on Redis, see updateChains) and,
// concurrently, each tenant's charge and the later settles of a record
// that has several; the key settles of every settle in it ride in the
// first of those round trips (one of their own when none reaches Redis).
// chs[i] is closed once recs[i]'s settles are written.
func (b *behind) write(recs []string, chs []chan struct{}, batch [][]*pendingSettle, sides []*pendingSettle) {
	ctx, cancel := context.WithTimeout(context.Background(), settleAttempt)
	defer cancel()
	var keys []ratelimit.Settlement
	var tenants []*pendingSettle
	for _, p := range slices.Concat(slices.Concat(batch...), sides) {
		if st := p.t.keySettlement(p.o); st.Grant != nil {
			keys = append(keys, st)
		}
		if p.tenantSide() {
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
		wg.Go(func() { p.t.settleTenant(rctx, p.charge, p.o) })
	}
	if len(batch) > 0 {
		ids := make([]string, len(batch))
		fns := make([]func([]*trajectory.Record) ([]trajectory.Event, error), len(batch))
		evs := make([][]trajectory.Event, len(batch))
		for i, ps := range batch {
			ids[i], fns[i] = recs[i], ps[0].update(&evs[i])
		}
		errs := updateChains(rctx, batch[0][0].t.s.store, ids, fns)
		for i, ps := range batch {
			ps[0].wrote(ctx, ps[0].saved(evs[i], errs[i]))
			wg.Go(func() {
				for _, p := range ps[1:] {
					p.write(ctx)
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

// chainsUpdater is a store that saves the updates of several records in
// one step (the Redis store: one pipeline).
type chainsUpdater interface {
	UpdateChains(ctx context.Context, ids []string, fns []func([]*trajectory.Record) ([]trajectory.Event, error)) []error
}

// updateChains is UpdateChain of each ids[i] with fns[i], in one step when
// st can, one after the other otherwise; errs[i] is ids[i]'s outcome.
func updateChains(ctx context.Context, st trajectory.Store, ids []string, fns []func([]*trajectory.Record) ([]trajectory.Event, error)) []error {
	if cu, ok := st.(chainsUpdater); ok {
		return cu.UpdateChains(ctx, ids, fns)
	}
	errs := make([]error, len(ids))
	for i, id := range ids {
		_, errs[i] = st.UpdateChain(ctx, id, fns[i])
	}
	return errs
}

// writeOne writes a settle at once, with a context that outlives the
// request, as finish does.
func (b *behind) writeOne(p *pendingSettle) {
	ctx, cancel := context.WithTimeout(context.Background(), settleAttempt)
	defer cancel()
	p.sides(ctx)
	p.write(ctx)
}

// writeSides writes the key and tenant settles of each of ps.
func (b *behind) writeSides(ps ...*pendingSettle) {
	for _, p := range ps {
		ctx, cancel := context.WithTimeout(context.Background(), settleAttempt)
		p.sides(ctx)
		cancel()
	}
}

// close writes what waits and stops the flush; later settles are
// written at once. It waits until ctx ends at most.
func (b *behind) close(ctx context.Context) {
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
