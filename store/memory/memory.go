// Package memory is the embedded trajectory store: records and their event
// logs held in this process's memory and lost when it exits. It serves one
// replica; replicas that share state use the Redis store instead.
package memory

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"gatekeeper/trajectory"
)

// DefaultMaxEvents is the event log length kept per trajectory when Options
// leaves it unset.
const DefaultMaxEvents = 10000

// Options configures a Store.
type Options struct {
	// MaxEventsPerTrajectory bounds each trajectory's event log; beyond it
	// the oldest events are dropped (their sequence numbers are not reused).
	// Zero or less means DefaultMaxEvents.
	MaxEventsPerTrajectory int
	// IdleRetention drops a run whose records are all idle (READY or
	// WAITING_TOOL) or finished, once none was written for that long;
	// zero keeps them. Retention drops a run whose records all finished
	// that long ago; zero keeps them.
	IdleRetention time.Duration
	Retention     time.Duration
	// SweepEvery is how often a background sweep drops what expired;
	// zero means a tenth of IdleRetention, within 1s..1m. No sweep runs
	// without IdleRetention or Retention; Sweep runs one at will.
	SweepEvery time.Duration
	// Clock dates writes; time.Now when nil.
	Clock func() time.Time
}

// Store keeps records and event logs in memory. It is safe for concurrent
// use. One lock guards everything, so Update's fn runs with the store
// locked: fn must be quick and must not call the store.
type Store struct {
	maxEvents int

	mu      sync.RWMutex
	entries map[string]*entry
	links   map[string]link // trajectory.Links, each until it expires
	closed  bool

	sig signals

	idle, retention time.Duration
	now             func() time.Time
	stopSweep       context.CancelFunc // nil when no sweep runs
	swept           chan struct{}      // closed when the sweep has returned
}

var _ trajectory.Store = (*Store)(nil)

// entry holds the record by value and its log inline, so an idle
// trajectory costs one allocation plus its log.
type entry struct {
	rec     trajectory.Record
	events  []trajectory.Event
	lastSeq int64
	touched time.Time // the last write
}

// New returns an empty store.
func New(opts Options) *Store {
	maxEvents := opts.MaxEventsPerTrajectory
	if maxEvents <= 0 {
		maxEvents = DefaultMaxEvents
	}
	s := &Store{maxEvents: maxEvents, entries: make(map[string]*entry), idle: opts.IdleRetention, retention: opts.Retention, now: opts.Clock}
	if s.now == nil {
		s.now = time.Now
	}
	if s.idle > 0 || s.retention > 0 {
		every := opts.SweepEvery
		if every <= 0 {
			every = min(max(max(s.idle, s.retention)/10, time.Second), time.Minute)
			if s.idle > 0 {
				every = min(max(s.idle/10, time.Second), time.Minute)
			}
		}
		var ctx context.Context
		ctx, s.stopSweep = context.WithCancel(context.Background())
		s.swept = make(chan struct{})
		go s.sweepEvery(ctx, every)
	}
	return s
}

// usable reports why the store cannot serve a call; the caller holds mu.
func (s *Store) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed {
		return trajectory.ErrClosed
	}
	return nil
}

func (s *Store) lookup(id string) (*entry, error) {
	e, ok := s.entries[id]
	if !ok {
		return nil, fmt.Errorf("%w: %q", trajectory.ErrNotFound, id)
	}
	return e, nil
}

// Create implements trajectory.Store.
func (s *Store) Create(ctx context.Context, rec *trajectory.Record, evs ...trajectory.Event) error {
	return s.create(ctx, rec, 0, evs)
}

// CreateChild implements trajectory.Store: the parent's count is checked
// under the lock that adds the child.
func (s *Store) CreateChild(ctx context.Context, rec *trajectory.Record, max int, evs ...trajectory.Event) error {
	if rec.ParentID == "" {
		return fmt.Errorf("%w: child record %q names no parent", trajectory.ErrInvalidRecord, rec.ID)
	}
	return s.create(ctx, rec, max, evs)
}

// create saves rec, a child only while its parent has fewer than max
// children (0: no bound).
func (s *Store) create(ctx context.Context, rec *trajectory.Record, max int, evs []trajectory.Event) error {
	if err := rec.Validate(); err != nil {
		return err
	}
	if len(rec.Children) > 0 {
		return fmt.Errorf("%w: new record %q already lists children", trajectory.ErrInvalidRecord, rec.ID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(ctx); err != nil {
		return err
	}
	if _, ok := s.entries[rec.ID]; ok {
		return fmt.Errorf("%w: %q", trajectory.ErrExists, rec.ID)
	}
	var parent *entry
	if rec.ParentID != "" {
		p, err := s.lookup(rec.ParentID)
		if err != nil {
			return fmt.Errorf("parent of %q: %w", rec.ID, err)
		}
		if kids := p.rec.Children; max > 0 && len(kids) >= max {
			return &trajectory.ChildrenFullError{Parent: rec.ParentID, Last: kids[len(kids)-1], Max: max}
		}
		parent = p
	}
	e := &entry{rec: *rec.Clone()}
	e.rec.Children = nil
	s.append(e, evs)
	s.entries[rec.ID] = e
	if parent != nil {
		parent.rec.Children = append(parent.rec.Children, rec.ID)
	}
	return nil
}

// Get implements trajectory.Store.
func (s *Store) Get(ctx context.Context, id string) (*trajectory.Record, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	e, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	return e.rec.Clone(), nil
}

// Update implements trajectory.Store. fn runs exactly once, under the lock.
func (s *Store) Update(ctx context.Context, id string, fn func(*trajectory.Record) ([]trajectory.Event, error)) (*trajectory.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	e, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	c := e.rec.Clone()
	evs, err := fn(c)
	if err != nil {
		return nil, err
	}
	switch {
	case c.ID != e.rec.ID:
		return nil, fmt.Errorf("%w: update of %q changed its id to %q", trajectory.ErrInvalidRecord, id, c.ID)
	case c.ParentID != e.rec.ParentID:
		return nil, fmt.Errorf("%w: update of %q changed its parent", trajectory.ErrInvalidRecord, id)
	case !slices.Equal(c.Children, e.rec.Children):
		return nil, fmt.Errorf("%w: update of %q changed its children", trajectory.ErrInvalidRecord, id)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	// fn may have kept c; store a copy it cannot reach.
	e.rec = c.Copy()
	s.append(e, evs)
	return c, nil
}

// UpdateChain implements trajectory.Store. fn runs exactly once, under the
// lock.
func (s *Store) UpdateChain(ctx context.Context, id string, fn func([]*trajectory.Record) ([]trajectory.Event, error)) ([]*trajectory.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	var deep [4]*entry // most chains are a run and a thread or two
	entries := deep[:0]
	for cur := id; cur != ""; {
		if len(entries) == trajectory.MaxDepth {
			return nil, fmt.Errorf("%w: the chain of %q is deeper than %d", trajectory.ErrInvalidRecord, id, trajectory.MaxDepth)
		}
		e, err := s.lookup(cur)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
		cur = e.rec.ParentID
	}
	chain := make([]*trajectory.Record, len(entries))
	for i, e := range entries {
		chain[i] = e.rec.Clone()
	}
	evs, err := fn(chain)
	if err != nil {
		return nil, err
	}
	for i, e := range entries {
		c := chain[i]
		switch {
		case c.ID != e.rec.ID:
			return nil, fmt.Errorf("%w: update of %q changed its id to %q", trajectory.ErrInvalidRecord, e.rec.ID, c.ID)
		case c.ParentID != e.rec.ParentID:
			return nil, fmt.Errorf("%w: update of %q changed its parent", trajectory.ErrInvalidRecord, e.rec.ID)
		case !slices.Equal(c.Children, e.rec.Children):
			return nil, fmt.Errorf("%w: update of %q changed its children", trajectory.ErrInvalidRecord, e.rec.ID)
		}
		if err := c.Validate(); err != nil {
			return nil, err
		}
	}
	for _, ev := range evs {
		to := ev.Trajectory
		if to == "" {
			to = id
		}
		if !slices.ContainsFunc(entries, func(e *entry) bool { return e.rec.ID == to }) {
			return nil, fmt.Errorf("%w: event for %q is outside the chain of %q", trajectory.ErrInvalidRecord, to, id)
		}
	}
	for i, e := range entries {
		// fn may have kept its copies; store ones it cannot reach.
		e.rec = chain[i].Copy()
		if len(entries) == 1 {
			s.append(e, evs) // every event is the one record's
			continue
		}
		var mine []trajectory.Event
		for _, ev := range evs {
			if ev.Trajectory == e.rec.ID || ev.Trajectory == "" && e.rec.ID == id {
				mine = append(mine, ev)
			}
		}
		s.append(e, mine)
	}
	return chain, nil
}

// List implements trajectory.Store.
func (s *Store) List(ctx context.Context, f trajectory.Filter) ([]*trajectory.Record, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	var matched []*trajectory.Record
	for _, e := range s.entries {
		if f.Match(&e.rec) {
			matched = append(matched, &e.rec)
		}
	}
	slices.SortFunc(matched, func(a, b *trajectory.Record) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	matched = matched[:min(len(matched), trajectory.PageLimit(f.Limit))]
	out := make([]*trajectory.Record, len(matched))
	for i, r := range matched {
		out[i] = r.Clone()
	}
	return out, nil
}

// AppendEvents implements trajectory.Store.
func (s *Store) AppendEvents(ctx context.Context, id string, evs ...trajectory.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(ctx); err != nil {
		return err
	}
	e, err := s.lookup(id)
	if err != nil {
		return err
	}
	s.append(e, evs)
	return nil
}

// Events implements trajectory.Store.
func (s *Store) Events(ctx context.Context, id string, afterSeq int64, limit int) ([]trajectory.Event, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	e, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	i := sort.Search(len(e.events), func(i int) bool { return e.events[i].Seq > afterSeq })
	page := e.events[i:min(len(e.events), i+trajectory.PageLimit(limit))]
	out := make([]trajectory.Event, len(page))
	for j, ev := range page {
		ev.Data = bytes.Clone(ev.Data)
		out[j] = ev
	}
	return out, nil
}

// InProcess reports that the store's calls wait on nothing outside the
// process (only on its lock): they need no deadline of their own.
func (s *Store) InProcess() bool { return true }

// Ping implements trajectory.Store.
func (s *Store) Ping(ctx context.Context) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.usable(ctx)
}

// Close drops everything the store holds; later calls return ErrClosed.
func (s *Store) Close() error {
	if s.stopSweep != nil {
		s.stopSweep()
		<-s.swept
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.entries, s.links = nil, nil
	return nil
}

// append numbers evs after e's last event and keeps the log within
// maxEvents. The caller holds mu for writing.
func (s *Store) append(e *entry, evs []trajectory.Event) {
	e.touched = s.now()
	for _, ev := range evs {
		e.lastSeq++
		ev.Seq = e.lastSeq
		ev.Trajectory = e.rec.ID
		ev.Data = bytes.Clone(ev.Data)
		e.events = append(e.events, ev)
	}
	if over := len(e.events) - s.maxEvents; over > 0 {
		// Reslicing keeps appends amortized O(1); clearing lets the dropped
		// events' data go before append next reallocates the array.
		clear(e.events[:over])
		e.events = e.events[over:]
	}
}
