package ratelimit

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// Defaults of Options.
const (
	DefaultMaxWait = 30 * time.Second
	DefaultPoll    = 25 * time.Millisecond
)

// ErrNoKeys is returned by Acquire when given no key to admit a turn on.
var ErrNoKeys = errors.New("ratelimit: no provider key")

// Options configure a Scheduler.
type Options struct {
	// Buckets holds the keys' capacity. Required.
	Buckets Buckets
	// Weights are the classes' shares of tokens while they wait; nil is
	// DefaultWeights. The three standard classes always exist (with
	// their default weight when missing here); a weight below 1 counts
	// as 1.
	Weights map[string]int
	// MaxWait is how long a turn may wait; 0 is DefaultMaxWait.
	MaxWait time.Duration
	// Clock is nil for time.Now.
	Clock func() time.Time
	// Observer receives metrics; nil for none.
	Observer Observer
	// Poll is how often a waiting scheduler looks at the buckets again
	// when it has no better guess, so that other replicas' releases
	// are seen; 0 is DefaultPoll.
	Poll time.Duration
	// Logger gets the errors no caller can receive (a failed correction
	// after a turn); nil is slog.Default().
	Logger *slog.Logger
	// Slices lets the scheduler take slices of roomy keys ahead of its
	// turns when the buckets are in Redis (see slices.go).
	Slices bool
}

// Observer receives the scheduler's metrics. Its methods may be called with
// the scheduler's lock held: they must be quick and must not call the
// Scheduler.
type Observer interface {
	// QueueLength is the number of turns of class waiting, on every
	// change.
	QueueLength(class string, n int)
	// QueueWait is how long an admitted turn of class waited (0 on the
	// fast path).
	QueueWait(class string, d time.Duration)
	// Headroom is the fraction left of a key's tightest dimension, after
	// each Take on it.
	Headroom(key string, fraction float64)
}

// poolHeadroomer is implemented by Buckets that answer the Headroom of
// several keys in one step.
type poolHeadroomer interface {
	headrooms(ctx context.Context, keys []Key) ([]float64, error)
}

var _ poolHeadroomer = (*Redis)(nil)

// Scheduler admits turns on keys, queueing them per class while no key has
// room. One dispatcher goroutine serves the queues; Close stops it.
type Scheduler struct {
	buckets Buckets
	weights map[string]int
	classes []string // in serving order: heaviest first
	maxWait time.Duration
	poll    time.Duration
	now     func() time.Time
	obs     Observer
	log     *slog.Logger

	ctx    context.Context // of the dispatcher's calls; canceled by Close
	cancel context.CancelFunc
	wake   chan struct{} // a non-blocking nudge to the dispatcher
	done   chan struct{} // closed when the dispatcher returned

	mu     sync.Mutex
	seen   map[string]float64 // each key's headroom as its last take answered it
	pools  map[string]*pool
	length map[string]int // waiting turns per class, all pools
	closed bool

	slicing bool              // Options.Slices, on Redis buckets
	slices  map[string]*slice // by key ID
	// sliceGen numbers the slices' asks and grants, so that an answer or
	// an expiry finds whether it is still the last.
	sliceGen uint64
}

// New starts a Scheduler.
func New(opts Options) *Scheduler {
	s := &Scheduler{
		buckets: opts.Buckets,
		weights: DefaultWeights(),
		maxWait: cmp.Or(opts.MaxWait, DefaultMaxWait),
		poll:    cmp.Or(opts.Poll, DefaultPoll),
		now:     opts.Clock,
		obs:     opts.Observer,
		log:     opts.Logger,
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		pools:   make(map[string]*pool),
		length:  make(map[string]int),
		seen:    make(map[string]float64),
		slicing: opts.Slices && redisOf(opts.Buckets) != nil,
		slices:  make(map[string]*slice),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	for c, w := range opts.Weights {
		s.weights[c] = max(w, 1)
	}
	for c := range s.weights {
		s.classes = append(s.classes, c)
	}
	slices.SortFunc(s.classes, func(a, b string) int {
		return cmp.Or(cmp.Compare(s.weights[b], s.weights[a]), strings.Compare(a, b))
	})
	s.ctx, s.cancel = context.WithCancel(context.Background())
	go s.dispatch()
	return s
}

// Close stops the dispatcher and fails the waiting turns with ErrClosed.
// Grants already given stay valid.
func (s *Scheduler) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.closeSlices()
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pools {
		for _, q := range p.queues {
			for w := q.head(); w != nil; w = q.head() {
				s.fail(p, w, ErrClosed)
			}
		}
	}
}

// class is c when it has a weight, else Standard.
func (s *Scheduler) class(c string) string {
	if _, ok := s.weights[c]; ok {
		return c
	}
	return Standard
}

// poolID names a set of keys regardless of their order.
func poolID(keys []Key) string {
	if len(keys) == 1 {
		return keys[0].ID // what the join of one is, without its allocations
	}
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.ID
	}
	slices.Sort(ids)
	return strings.Join(ids, "\x00")
}

// Acquire admits a turn of class (unknown class = Standard) with estimate
// est on the key of keys with the most headroom that can take it now,
// waiting in the class queue while none can, at most MaxWait (then a
// *WaitError) or until ctx ends (then ctx's error). The returned Grant says
// which key; its Done must be called when the turn ends.
func (s *Scheduler) Acquire(ctx context.Context, class string, keys []Key, est Cost) (*Grant, error) {
	if len(keys) == 0 {
		return nil, ErrNoKeys
	}
	class = s.class(class)
	start := s.now()
	id := poolID(keys)

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	p := s.pools[id]
	waiting := p != nil && p.n > 0
	s.mu.Unlock()

	// The fast path: nobody of this pool waits, so a key with room now
	// admits the turn without a trip through the dispatcher.
	if !waiting {
		k, ok, _, err := s.pick(ctx, keys, est, "")
		if err != nil {
			return nil, err
		}
		if ok {
			s.mu.Lock()
			s.observeWait(class, 0)
			s.mu.Unlock()
			return s.grant(k, class, est, 0), nil
		}
	}

	w := &waiter{
		class:  class,
		keys:   slices.Clone(keys),
		est:    est,
		charge: max(est.Tokens(), 1),
		enq:    start,
		ready:  make(chan result, 1),
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	p = s.pools[id]
	if p == nil {
		p = newPool(id, w.keys, s.classes, s.weights)
		s.pools[id] = p
	}
	p.push(w, start)
	s.setLength(class, +1)
	s.mu.Unlock()
	s.nudge()

	select {
	case r := <-w.ready:
		return r.g, r.err
	case <-ctx.Done():
	}
	s.mu.Lock()
	if w.q != nil {
		s.leave(p, w)
		s.mu.Unlock()
		s.nudge()
		return nil, ctx.Err()
	}
	s.mu.Unlock()
	// The dispatcher answered as ctx ended: the answer is in ready.
	// Give a grant nobody will use back.
	if r := <-w.ready; r.g != nil {
		r.g.release(context.WithoutCancel(ctx))
	}
	return nil, ctx.Err()
}

// nudge wakes the dispatcher if it sleeps.
func (s *Scheduler) nudge() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// grant makes the Grant of a turn admitted on k.
func (s *Scheduler) grant(k Key, class string, est Cost, waited time.Duration) *Grant {
	return &Grant{Key: k, Waited: waited, s: s, class: class, est: est}
}

// pick takes est on the key of keys, other than skip, with the most
// headroom that has room now. When none has, ok is false and wait is the
// shortest wait any Take returned. Keys without limits are measured
// against their pool's (see measured).
func (s *Scheduler) pick(ctx context.Context, keys []Key, est Cost, skip string) (k Key, ok bool, wait time.Duration, err error) {
	on, wait, err := s.pickBatch(ctx, keys, []Cost{est}, skip)
	if err != nil || len(on) == 0 {
		return Key{}, false, wait, err
	}
	return on[0], true, 0, nil
}

// pickBatch takes ests in order, as pick takes one, on the keys of keys
// other than skip, the most headroom first: each key takes as many of
// the ests left as it has room for. on[i] is the key ests[i] was taken
// on, for as many as were taken; wait, when not all were, is the
// shortest wait any key returned. An error after some were taken ends
// the batch there without it: the next pass meets it again.
func (s *Scheduler) pickBatch(ctx context.Context, keys []Key, ests []Cost, skip string) (on []Key, wait time.Duration, err error) {
	keys = measured(keys)
	order := keys
	if len(keys) > 1 {
		if order, err = s.byHeadroom(ctx, keys); err != nil {
			return nil, 0, err
		}
	}
	wait = MaxTakeWait
	for _, k := range order {
		if k.ID == skip {
			continue
		}
		n, w, err := s.takeBatch(ctx, k, ests[len(on):])
		for range n {
			on = append(on, k)
		}
		switch {
		case err != nil && len(on) == 0:
			return nil, 0, err
		case err != nil:
			return on, minTakeWait, nil
		case len(on) == len(ests):
			return on, 0, nil
		}
		wait = min(wait, w)
	}
	return on, wait, nil
}

// byHeadroom is keys, the most headroom first (stable among equals, so
// that a pool's first key is used first).
func (s *Scheduler) byHeadroom(ctx context.Context, keys []Key) ([]Key, error) {
	type kh struct {
		k Key
		h float64
	}
	all := make([]kh, len(keys))
	if ph, ok := s.buckets.(poolHeadroomer); ok {
		hs, err := ph.headrooms(ctx, keys)
		if err != nil {
			return nil, err
		}
		for i, k := range keys {
			all[i] = kh{k, hs[i]}
		}
	} else {
		for i, k := range keys {
			h, err := s.buckets.Headroom(ctx, k)
			if err != nil {
				return nil, err
			}
			all[i] = kh{k, h}
		}
	}
	slices.SortStableFunc(all, func(a, b kh) int { return cmp.Compare(b.h, a.h) })
	out := make([]Key, len(all))
	for i, e := range all {
		out[i] = e.k
	}
	return out, nil
}

// measured is keys, where a key without limits in a pool with limited
// keys is given advisory limits: the pool's largest limit and burst in
// each dimension. Ranked at a headroom of 1 forever, such a key would take
// every turn while the limited keys stood idle, until the provider refused
// it. Measured as if it were its pool's largest key, it is ranked by what
// it was observed to carry instead: its own recent takes, the provider's
// rate-limit headers on its replies (remaining and reset), and a 429's
// cooling (headroom 0), as a limited key is. It still never makes a turn
// wait: when the limited keys have no room, it takes the turn.
func measured(keys []Key) []Key {
	var peer Limits
	unlimited := 0
	for _, k := range keys {
		if k.Advisory || k.Limits.unlimited() {
			unlimited++
			continue
		}
		lim, b := perMinute(k.Limits), bursts(k.Limits)
		peer.RPM, peer.RPMBurst = max(peer.RPM, int(lim[dimRequests])), max(peer.RPMBurst, int(b[dimRequests]))
		peer.InputTPM, peer.InputBurst = max(peer.InputTPM, lim[dimInput]), max(peer.InputBurst, b[dimInput])
		peer.OutputTPM, peer.OutputBurst = max(peer.OutputTPM, lim[dimOutput]), max(peer.OutputBurst, b[dimOutput])
	}
	if unlimited == 0 || peer.unlimited() {
		return keys
	}
	out := slices.Clone(keys)
	for i, k := range out {
		if k.Limits.unlimited() {
			out[i] = Key{ID: k.ID, Limits: peer, Advisory: true}
		}
	}
	return out
}

// takeBatch takes cs on k in order until one has no room (BatchTaker),
// first from k's slice, and reports k's headroom as the buckets answer
// it. n is how many it took.
func (s *Scheduler) takeBatch(ctx context.Context, k Key, cs []Cost) (n int, wait time.Duration, err error) {
	for n < len(cs) && s.fromSlice(k, cs[n]) {
		n++
	}
	if n == len(cs) {
		return n, 0, nil
	}
	if bt, ok := s.buckets.(BatchTaker); ok {
		m, wait, h, err := bt.TakeBatch(ctx, k, cs[n:])
		if err != nil {
			return n, 0, err
		}
		s.noteHeadroom(k.ID, h)
		return n + m, wait, nil
	}
	for ; n < len(cs); n++ {
		ok, w, err := s.buckets.Take(ctx, k, cs[n])
		if err != nil {
			return n, 0, err
		}
		if !ok {
			wait = w
			break
		}
	}
	if s.obs != nil {
		if h, herr := s.buckets.Headroom(ctx, k); herr == nil {
			s.obs.Headroom(k.ID, h)
		}
	}
	return n, wait, nil
}

// setLength counts a turn of class joining (+1) or leaving (-1) a queue.
// s.mu is held.
func (s *Scheduler) setLength(class string, delta int) {
	s.length[class] += delta
	if s.obs != nil {
		s.obs.QueueLength(class, s.length[class])
	}
}

// observeWait reports an admission. s.mu is held.
func (s *Scheduler) observeWait(class string, d time.Duration) {
	if s.obs != nil {
		s.obs.QueueWait(class, d)
	}
}

// leave takes w out of p, dropping p when it is empty. s.mu is held.
func (s *Scheduler) leave(p *pool, w *waiter) {
	p.remove(w, s.now())
	s.setLength(w.class, -1)
	if p.n == 0 {
		delete(s.pools, p.id)
	}
}

// fail answers w with err and takes it out of p. s.mu is held.
func (s *Scheduler) fail(p *pool, w *waiter, err error) {
	s.leave(p, w)
	w.ready <- result{err: err}
}

// released tells the dispatcher that capacity came back, so that pools
// blocked on a wait look again now.
func (s *Scheduler) released() {
	s.mu.Lock()
	for _, p := range s.pools {
		p.blockedUntil = time.Time{}
	}
	s.mu.Unlock()
	s.nudge()
}

// noteHeadroom keeps k's headroom as a take answered it, for the Observer
// and for the key a Ride chooses.
func (s *Scheduler) noteHeadroom(id string, h float64) {
	s.mu.Lock()
	s.seen[id] = h
	s.mu.Unlock()
	if s.obs != nil {
		s.obs.Headroom(id, h)
	}
}

// seenHeadroom is k's headroom as last seen, 1 (full) when never seen.
// s.mu is held.
func (s *Scheduler) seenHeadroom(id string) float64 {
	if h, ok := s.seen[id]; ok {
		return h
	}
	return 1
}
