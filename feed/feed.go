package feed

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Defaults of Options.
const (
	// DefaultRetain is how many of the latest events the log keeps: the
	// window within which a subscriber resumes without a gap.
	DefaultRetain = 10000
	// DefaultBuffer is how many events a subscriber may fall behind by
	// before it is dropped.
	DefaultBuffer = 1024
	// DefaultQueue bounds the events waiting to be appended to the log.
	DefaultQueue = 4096
)

// Bounds of the feed's own work.
const (
	appendBatch   = 256             // events appended in one round trip
	appendTimeout = 5 * time.Second // one append
	readPage      = 1000            // entries read in one round trip
	retryEvery    = time.Second     // after the log failed to answer
)

// Errors of a Subscription.
var (
	// ErrDropped ends a subscription that fell more than its buffer
	// behind.
	ErrDropped = errors.New("feed: subscriber fell behind and was dropped")
	// ErrClosed is returned once the Feed is closed.
	ErrClosed = errors.New("feed: closed")
)

// Options configure a Feed.
type Options struct {
	// Redis, when set, keeps the log in a Redis stream shared by every
	// replica using the same Redis; nil keeps it in this process.
	Redis goredis.UniversalClient
	// Retain, Buffer and Queue: see the defaults.
	Retain, Buffer, Queue int
	Logger                *slog.Logger     // nil: slog.Default()
	Clock                 func() time.Time // nil: time.Now (memory log ids)
}

// Stats counts what a Feed did since New.
type Stats struct {
	Published uint64 // appended to the log
	Lost      uint64 // never appended: the queue was full or the log failed
	Malformed uint64 // log entries that were not events, skipped
	Dropped   uint64 // subscribers dropped for falling behind
}

// Feed publishes events to its log and delivers the log's events to this
// process's subscribers. One goroutine appends, one follows the log; New
// starts them, Close stops them.
type Feed struct {
	log    eventLog
	logger *slog.Logger
	buffer int
	retain int
	in     chan Event

	mu   sync.Mutex
	subs map[*Subscription]struct{}
	// cur is where follow reads the log from. With no subscriber follow
	// reads nothing (idle): the first subscriber sets cur to where the
	// log ends and wakes it.
	cur  ID
	idle bool
	wake chan struct{}

	published, lost, malformed, dropped atomic.Uint64

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// New opens a Feed: it reads where the log ends now (so it needs the log
// to answer) and starts following it from there.
func New(ctx context.Context, o Options) (*Feed, error) {
	if o.Retain <= 0 {
		o.Retain = DefaultRetain
	}
	if o.Buffer <= 0 {
		o.Buffer = DefaultBuffer
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	f := &Feed{logger: o.Logger, buffer: o.Buffer, retain: o.Retain, in: make(chan Event, o.Queue), subs: make(map[*Subscription]struct{}),
		wake: make(chan struct{}, 1)}
	if o.Redis != nil {
		f.log = &redisLog{rdb: o.Redis, key: StreamKey, retain: int64(o.Retain)}
	} else {
		f.log = newMemoryLog(o.Clock, o.Retain)
	}
	start, err := f.log.last(ctx)
	if err != nil {
		return nil, err
	}
	f.cur = start
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	f.stop = stop
	f.wg.Add(2)
	go func() { defer f.wg.Done(); f.write(bg) }()
	go func() { defer f.wg.Done(); f.follow(bg) }()
	return f, nil
}

// Close stops the Feed's goroutines, appending what is queued while ctx
// allows, and ends every subscription.
func (f *Feed) Close(ctx context.Context) error {
	f.stop()
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	f.EndSubscriptions()
	return nil
}

// EndSubscriptions ends every subscription (their Next returns ErrClosed)
// and refuses new ones, so that a server shutting down is not held by
// streams that never end on their own.
func (f *Feed) EndSubscriptions() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs {
		delete(f.subs, s)
		close(s.ch)
	}
	f.subs = nil
}

// Stats returns the Feed's counts.
func (f *Feed) Stats() Stats {
	return Stats{Published: f.published.Load(), Lost: f.lost.Load(), Malformed: f.malformed.Load(), Dropped: f.dropped.Load()}
}

// Publish queues e for the log and returns at once: a full queue loses
// the event (counted in Stats.Lost and logged) rather than wait, so that
// nothing a turn does ever waits on subscribers or on the log.
func (f *Feed) Publish(e Event) {
	select {
	case f.in <- e:
	default:
		if n := f.lost.Add(1); n&(n-1) == 0 { // the 1st, 2nd, 4th... loss
			f.logger.Warn("feed: event queue full, events lost", slog.Uint64("lost", n), slog.String("kind", string(e.Kind)))
		}
	}
}

// Lost counts an event that could not be published (it could not be
// encoded) and logs why.
func (f *Feed) Lost(kind Kind, err error) {
	f.lost.Add(1)
	f.logger.Error("feed: encoding an event", slog.String("kind", string(kind)), slog.String("error", err.Error()))
}

// write appends queued events to the log in batches until ctx ends, then
// appends what is left for a short while.
func (f *Feed) write(ctx context.Context) {
	batch := make([]Event, 0, appendBatch)
	for {
		select {
		case e := <-f.in:
			batch = f.collect(batch[:0], e)
			f.appendBatch(ctx, batch)
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), appendTimeout)
			defer cancel()
			for {
				select {
				case e := <-f.in:
					batch = f.collect(batch[:0], e)
					f.appendBatch(fctx, batch)
				default:
					return
				}
			}
		}
	}
}

// collect takes e and whatever else is queued, up to appendBatch.
func (f *Feed) collect(batch []Event, e Event) []Event {
	for {
		batch = append(batch, e)
		if len(batch) == appendBatch {
			return batch
		}
		select {
		case e = <-f.in:
		default:
			return batch
		}
	}
}

func (f *Feed) appendBatch(ctx context.Context, batch []Event) {
	if len(batch) == 0 {
		return
	}
	if err := f.log.append(ctx, batch); err != nil {
		f.lost.Add(uint64(len(batch)))
		f.logger.Error("feed: appending events to the log", slog.Int("events", len(batch)), slog.String("error", err.Error()))
		return
	}
	f.published.Add(uint64(len(batch)))
}

// follow hands every event the log gets, from any replica, to the
// subscribers, until ctx ends. A log that fails is read again from where
// it stopped, so no event is skipped. While nothing is subscribed it
// reads nothing: an event nobody follows costs no read and no decoding.
func (f *Feed) follow(ctx context.Context) {
	for ctx.Err() == nil {
		f.mu.Lock()
		if len(f.subs) == 0 {
			f.idle = true
			f.mu.Unlock()
			select {
			case <-f.wake:
			case <-ctx.Done():
				return
			}
			continue
		}
		cur := f.cur
		f.mu.Unlock()
		rs, err := f.log.wait(ctx, cur, readPage)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.logger.Error("feed: reading the log", slog.String("error", err.Error()))
			select {
			case <-time.After(retryEvery):
			case <-ctx.Done():
				return
			}
			continue
		}
		for i := range rs {
			if e, ok := f.decode(&rs[i]); ok {
				f.dispatch(&e)
			}
		}
		if len(rs) > 0 {
			f.mu.Lock()
			if !f.idle {
				f.cur = rs[len(rs)-1].id
			}
			f.mu.Unlock()
		}
	}
}

func (f *Feed) decode(r *raw) (Event, bool) {
	if r.ok {
		return r.ev, true
	}
	e, err := decodeEntry(r.id, r.b)
	if err != nil {
		if n := f.malformed.Add(1); n&(n-1) == 0 {
			f.logger.Warn("feed: skipping a log entry", slog.Uint64("malformed", n), slog.String("error", err.Error()))
		}
		return Event{}, false
	}
	return e, true
}

// dispatch offers e to every subscriber whose filter it passes, never
// waiting: a subscriber whose buffer is full is dropped.
func (f *Feed) dispatch(e *Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs {
		if !s.filter.Match(e) {
			continue
		}
		if e.enc == nil {
			e.enc = appendEvent(nil, e) // once, for every subscriber
		}
		select {
		case s.ch <- *e:
		default:
			delete(f.subs, s)
			s.dropped.Store(true)
			close(s.ch)
			f.dropped.Add(1)
		}
	}
}

// Subscription is one subscriber's view of the stream.
type Subscription struct {
	f       *Feed
	filter  Filter
	ch      chan Event
	dropped atomic.Bool
	backlog []Event
	last    ID
	// Gap is set when the subscription resumed from an id older than the
	// log keeps: events between it and the first delivered were lost.
	Gap bool
}

// Subscribe starts a subscription to the events f passes. With a zero
// after it delivers events from now on; otherwise it first delivers the
// log's events after after (at most the log's retention), then the live
// ones, without a gap or a repeat. It ends when ctx ends.
func (f *Feed) Subscribe(ctx context.Context, filter Filter, after ID) (*Subscription, error) {
	s := &Subscription{f: f, filter: filter, ch: make(chan Event, f.buffer), last: after}
	if err := f.register(ctx, s); err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, s.Close)
	if after.IsZero() {
		return s, nil
	}
	// Registered first, read second: an event appended meanwhile is in
	// the backlog, in the channel or both, and Next passes over repeats.
	cur := after
	for read := 0; read < f.retain; {
		rs, gap, err := f.log.read(ctx, cur, readPage)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.Gap = s.Gap || gap && cur == after
		for i := range rs {
			cur = rs[i].id
			if e, ok := f.decode(&rs[i]); ok && filter.Match(&e) {
				s.backlog = append(s.backlog, e)
			}
		}
		read += len(rs)
		if len(rs) < readPage {
			break
		}
	}
	return s, nil
}

// register adds s to the subscribers. The first one wakes follow from
// where the log ends now: read before s is added, so that follow misses
// nothing published after s was added (it may deliver a little from
// before, which a subscriber from now on does not mind and one resuming
// passes over as repeats).
func (f *Feed) register(ctx context.Context, s *Subscription) error {
	for range 3 { // one more try for each time follow went idle meanwhile
		f.mu.Lock()
		idle := f.idle
		f.mu.Unlock()
		var end ID
		if idle {
			var err error
			if end, err = f.log.last(ctx); err != nil {
				return err
			}
		}
		f.mu.Lock()
		switch {
		case f.subs == nil:
			f.mu.Unlock()
			return ErrClosed
		case f.idle && !idle:
			f.mu.Unlock()
			continue
		case f.idle:
			f.idle, f.cur = false, end
			select {
			case f.wake <- struct{}{}:
			default:
			}
		}
		f.subs[s] = struct{}{}
		f.mu.Unlock()
		return nil
	}
	return errors.New("feed: the log's follower kept stopping while a subscriber was added")
}

// Next returns the next event, waiting until there is one or ctx ends. It
// returns ErrDropped once the subscriber fell behind (Last then says
// where to resume) and ErrClosed once the Feed or the subscription is
// closed.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	if e, ok := s.fromBacklog(); ok {
		return e, nil
	}
	for {
		select {
		case e, ok := <-s.ch:
			if e, err, done := s.received(e, ok); done {
				return e, err
			}
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// TryNext returns the next event if one is already there, without
// waiting, so that a subscriber writes what came together in one go.
func (s *Subscription) TryNext() (Event, bool) {
	if e, ok := s.fromBacklog(); ok {
		return e, true
	}
	for {
		select {
		case e, ok := <-s.ch:
			if e, err, done := s.received(e, ok); done {
				return e, err == nil
			}
		default:
			return Event{}, false
		}
	}
}

func (s *Subscription) fromBacklog() (Event, bool) {
	if len(s.backlog) == 0 {
		return Event{}, false
	}
	e := s.backlog[0]
	s.backlog = s.backlog[1:]
	s.last = e.id
	return e, true
}

// received takes what the channel gave: an event to return, the end of
// the subscription, or (not done) a repeat of one the backlog delivered.
func (s *Subscription) received(e Event, ok bool) (_ Event, _ error, done bool) {
	switch {
	case !ok && s.dropped.Load():
		return Event{}, ErrDropped, true
	case !ok:
		return Event{}, ErrClosed, true
	case !s.last.Less(e.id):
		return Event{}, nil, false
	}
	s.last = e.id
	return e, nil, true
}

// Last is the id of the last event Next returned, or the one the
// subscription resumed from.
func (s *Subscription) Last() ID { return s.last }

// Close ends the subscription.
func (s *Subscription) Close() {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if _, ok := s.f.subs[s]; ok {
		delete(s.f.subs, s)
		close(s.ch)
	}
}
