package approvals

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"gatekeeper/config"
	"gatekeeper/trajectory"
)

// Bounds of the Service.
const (
	// notifyTimeout bounds one notification: a slow channel never holds a
	// goroutine for long, and never the turn at all.
	notifyTimeout = 10 * time.Second
	// sweepEvery is how often Run looks for expired requests.
	sweepEvery = time.Second
	// sweepBatch bounds one Due call.
	sweepBatch = 100
)

// ServiceOptions are what a Service is built from.
type ServiceOptions struct {
	Store     Store
	Gates     *Gates
	Notifiers []Notifier
	Signals   trajectory.Signals // nil: no signal is published
	Clock     func() time.Time   // nil: time.Now
	Logger    *slog.Logger       // nil: slog.Default()
	// Decided is called once for every request decided (telemetry).
	Decided func(r *Request)
	// MaxPending bounds the pending requests per trajectory root; 0 means
	// config.DefaultMaxPending.
	MaxPending int
}

// Service opens approval requests, applies votes, expires what nobody
// answered and tells the channels and the replica holding the turn. It owns
// the goroutines that deliver notifications; Close stops and waits for them.
type Service struct {
	o    ServiceOptions
	now  func() time.Time
	log  *slog.Logger
	wake chan struct{}
	bg   context.Context
	stop context.CancelFunc
	mu   sync.Mutex // guards wg.Add against Close
	wg   sync.WaitGroup
}

// NewService returns a Service over o.Store.
func NewService(o ServiceOptions) *Service {
	if o.MaxPending <= 0 {
		o.MaxPending = config.DefaultMaxPending
	}
	s := &Service{o: o, now: o.Clock, log: o.Logger, wake: make(chan struct{}, 1)}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.bg, s.stop = context.WithCancel(context.Background())
	return s
}

// Store returns the store the Service keeps requests in.
func (s *Service) Store() Store { return s.o.Store }

// Gates returns the compiled gates.
func (s *Service) Gates() *Gates { return s.o.Gates }

// NewID returns a fresh random id with prefix ("apr_", "hold_").
func NewID(prefix string) string { return prefix + strings.ToLower(rand.Text()) }

// Open stores h and reqs, filling in their ids and their links to each
// other, then announces each request to every notifier in the background
// (bounded time, errors logged, never blocking the turn). When the turn is
// already held (same trajectory and key) by another hold than h.Previous it
// returns that hold and ErrExists. It returns ErrTooManyPending when the trajectory root already
// has MaxPending requests waiting.
func (s *Service) Open(ctx context.Context, h *Hold, reqs []*Request) (*Hold, error) {
	existing, err := s.o.Store.FindHold(ctx, h.Trajectory, h.Key)
	switch {
	case err == nil && existing.ID != h.Previous:
		return existing, ErrExists
	case err != nil && !errors.Is(err, ErrNotFound):
		return nil, err
	}
	pending, err := s.o.Store.List(ctx, Filter{State: Pending, Root: h.Root, Limit: MaxListLimit})
	if err != nil {
		return nil, err
	}
	if len(pending)+len(reqs) > s.o.MaxPending {
		return nil, fmt.Errorf("%w (%d pending, at most %d)", ErrTooManyPending, len(pending), s.o.MaxPending)
	}
	now := s.now()
	if h.ID == "" {
		h.ID = NewID("hold_")
	}
	if h.State == "" {
		h.State = Holding
	}
	if h.CreatedAt.IsZero() {
		h.CreatedAt = now
	}
	h.Requests = h.Requests[:0:0]
	for _, r := range reqs {
		if r.ID == "" {
			r.ID = NewID("apr_")
		}
		r.Hold = h.ID
		r.Trajectory = h.Trajectory
		r.Root = h.Root
		r.Tenant = h.Tenant
		if r.State == "" {
			r.State = Pending
		}
		if r.CreatedAt.IsZero() {
			r.CreatedAt = now
		}
		if r.ExpiresAt.After(h.ExpiresAt) {
			h.ExpiresAt = r.ExpiresAt
		}
		h.Requests = append(h.Requests, r.ID)
	}
	stored, err := s.o.Store.CreateHold(ctx, h, reqs)
	if err != nil {
		return stored, err
	}
	for _, r := range reqs {
		s.log.InfoContext(ctx, "approval requested", "approval_id", r.ID, "trajectory_id", r.Trajectory,
			"gate", r.Gate, "tool", r.Call.Name, "digest", r.Digest, "expires_at", r.ExpiresAt)
		s.notify(r.Clone(), Notifier.Announce, "announce")
	}
	s.Wake()
	return stored, nil
}

// Vote casts v on request id; on a decision it notifies and publishes
// SignalKind. A vote after the expiry returns ErrExpired and expires the
// request.
func (s *Service) Vote(ctx context.Context, id string, v Vote) (*Request, error) {
	var castErr error
	var changed bool
	r, err := s.o.Store.Update(ctx, id, func(r *Request) error {
		was := r.State
		_, castErr = r.Cast(v, s.now())
		changed = was != r.State
		if errors.Is(castErr, ErrExpired) {
			return nil // keep the expiry
		}
		return castErr
	})
	if err != nil {
		return nil, err
	}
	if changed {
		s.finished(ctx, r)
	}
	if castErr != nil {
		return r, castErr
	}
	s.log.InfoContext(ctx, "approval vote", "approval_id", r.ID, "trajectory_id", r.Trajectory,
		"approver", v.Approver, "approve", v.Approve, "via", v.Via, "state", r.State)
	return r, nil
}

// Decide marks a pending request Stale or Withdrawn with reason, notifies
// and publishes.
func (s *Service) Decide(ctx context.Context, id string, st State, reason string) (*Request, error) {
	r, err := s.o.Store.Update(ctx, id, func(r *Request) error {
		return r.MarkStale(st, reason, s.now())
	})
	if err != nil {
		return nil, err
	}
	s.finished(ctx, r)
	return r, nil
}

// Wake makes Run look for due requests at once.
func (s *Service) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run expires due requests (every second, and at once when woken) until ctx
// ends, then stops the notifications still running and waits for them.
func (s *Service) Run(ctx context.Context) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		s.Sweep(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
		}
	}
}

// Sweep expires every request due now and reports how many it expired.
func (s *Service) Sweep(ctx context.Context) int {
	n := 0
	for range 100 { // at most 100 batches a sweep; the rest waits a second
		now := s.now()
		due, err := s.o.Store.Due(ctx, now, sweepBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.log.ErrorContext(ctx, "approvals: listing due requests", "err", err)
			}
			return n
		}
		progress := 0
		for _, d := range due {
			var expired bool
			r, err := s.o.Store.Update(ctx, d.ID, func(r *Request) error {
				expired = r.Expire(now)
				return nil
			})
			if err != nil {
				s.log.ErrorContext(ctx, "approvals: expiring a request", "approval_id", d.ID, "err", err)
				continue
			}
			progress++
			if expired {
				n++
				s.finished(ctx, r)
			}
		}
		if len(due) < sweepBatch || progress == 0 {
			return n
		}
	}
	return n
}

// OldestPending reports how long the oldest request still pending has
// waited (0 when none is), across every replica sharing the store. It looks
// at the sweepBatch requests that expire first, which hold the oldest
// whenever fewer are pending, or every gate has one expiry.
func (s *Service) OldestPending(ctx context.Context) (time.Duration, error) {
	now := s.now()
	reqs, err := s.o.Store.Due(ctx, now.Add(pendingHorizon), sweepBatch)
	if err != nil {
		return 0, err
	}
	var oldest time.Duration
	for _, r := range reqs {
		if r.State == Pending {
			oldest = max(oldest, now.Sub(r.CreatedAt))
		}
	}
	return oldest, nil
}

// pendingHorizon is past every request's expiry: Due then lists the
// pending requests whatever their expiry.
const pendingHorizon = 100 * 365 * 24 * time.Hour

// finished tells everyone a request was decided: the replica holding its
// turn (signal), the telemetry hook and the channels.
func (s *Service) finished(ctx context.Context, r *Request) {
	s.log.InfoContext(ctx, "approval decided", "approval_id", r.ID, "trajectory_id", r.Trajectory,
		"gate", r.Gate, "state", r.State)
	if s.o.Signals != nil {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), notifyTimeout)
		err := s.o.Signals.Publish(pctx, trajectory.Signal{ID: r.Trajectory, Kind: SignalKind})
		cancel()
		if err != nil {
			s.log.ErrorContext(ctx, "approvals: publishing a decision", "approval_id", r.ID, "err", err)
		}
	}
	if s.o.Decided != nil {
		s.o.Decided(r.Clone())
	}
	s.notify(r.Clone(), Notifier.Decided, "decided")
}

// notify runs call for every notifier in the background, each bounded by
// notifyTimeout and stopped by Close.
func (s *Service) notify(r *Request, call func(Notifier, context.Context, *Request) error, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bg.Err() != nil { // closed
		return
	}
	for _, n := range s.o.Notifiers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			ctx, cancel := context.WithTimeout(s.bg, notifyTimeout)
			defer cancel()
			if err := call(n, ctx, r); err != nil {
				s.log.Error("approvals: notification failed", "approval_id", r.ID, "notice", what,
					"channel", fmt.Sprintf("%T", n), "err", err)
			}
		}()
	}
}

// Close stops the notifications still running and waits for them, or for
// ctx to end.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	s.stop()
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
