package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"gatekeeper/trajectory"
)

// stallStore stalls every call, while stalled, until its context ends, as
// a store that stopped answering does.
type stallStore struct {
	trajectory.Store
	stalled   atomic.Bool
	deadlined atomic.Int64 // stalled calls whose context had a deadline
}

func (s *stallStore) stall(ctx context.Context) error {
	if _, ok := ctx.Deadline(); ok {
		s.deadlined.Add(1)
	}
	<-ctx.Done()
	return fmt.Errorf("store: %w (%w)", trajectory.ErrUnavailable, ctx.Err())
}

func (s *stallStore) Get(ctx context.Context, id string) (*trajectory.Record, error) {
	if s.stalled.Load() {
		return nil, s.stall(ctx)
	}
	return s.Store.Get(ctx, id)
}

func (s *stallStore) Create(ctx context.Context, rec *trajectory.Record, evs ...trajectory.Event) error {
	if s.stalled.Load() {
		return s.stall(ctx)
	}
	return s.Store.Create(ctx, rec, evs...)
}

func (s *stallStore) CreateChild(ctx context.Context, rec *trajectory.Record, max int, evs ...trajectory.Event) error {
	if s.stalled.Load() {
		return s.stall(ctx)
	}
	return s.Store.CreateChild(ctx, rec, max, evs...)
}

func (s *stallStore) UpdateChain(ctx context.Context, id string, fn func([]*trajectory.Record) ([]trajectory.Event, error)) ([]*trajectory.Record, error) {
	if s.stalled.Load() {
		return nil, s.stall(ctx)
	}
	return s.Store.UpdateChain(ctx, id, fn)
}

// TestStoreStallAnswers503: with the store stalled, a turn waits
// store.timeout for it, not the agent's patience: it is answered 503 with
// Retry-After in the provider's format, and nothing is forwarded.
func TestStoreStallAnswers503(t *testing.T) {
	ss := &stallStore{}
	e := newEnv(t, envOpts{storeTimeout: 100 * time.Millisecond,
		wrap: func(s trajectory.Store) trajectory.Store { ss.Store = s; return ss }})
	ss.stalled.Store(true)
	for _, c := range []struct{ name, path, body string }{
		{"anthropic", "/t/stall-1/anthropic/v1/messages", anthropicReq(true, "hi")},
		{"openai", "/t/stall-2/openai/v1/chat/completions", `{"model":"gpt-4.1","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := hdr()
			if c.name == "openai" {
				h = []string{"Authorization", "Bearer " + vkA, "content-type", "application/json"}
			}
			resp := e.do(t, "POST", c.path, c.body, h...)
			b := readAll(t, resp)
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Errorf("status %d Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
			}
			want := `"type":"error"`
			if c.name == "openai" {
				want = `"error":{`
			}
			if !bytes.Contains(b, []byte(want)) {
				t.Errorf("the 503 is not in the provider's error format: %s", b)
			}
		})
	}
	if ss.deadlined.Load() == 0 {
		t.Error("no stalled store call carried a deadline")
	}
	if n := len(e.mock.Requests()); n != 0 {
		t.Errorf("%d requests forwarded with the store stalled", n)
	}
}

// lostStore saves an update and then, lose times, says the store could
// not be reached, as a reply lost after the script ran.
type lostStore struct {
	trajectory.Store
	lose atomic.Int64
}

func (s *lostStore) UpdateChain(ctx context.Context, id string, fn func([]*trajectory.Record) ([]trajectory.Event, error)) ([]*trajectory.Record, error) {
	out, err := s.Store.UpdateChain(ctx, id, fn)
	if err == nil && s.lose.Add(-1) >= 0 {
		return nil, fmt.Errorf("store: %w: reply lost", trajectory.ErrUnavailable)
	}
	return out, err
}

// TestAdmissionAnswerLostAdmitsOnce: the admission is saved but its answer
// lost. Sent again, it finds its own call on the record: the turn goes on
// on the same record (no sibling, no phantom call), holds one reservation
// and is charged once.
func TestAdmissionAnswerLostAdmitsOnce(t *testing.T) {
	ls := &lostStore{}
	e := newEnv(t, envOpts{wrap: func(s trajectory.Store) trajectory.Store { ls.Store = s; return ls }})
	ls.lose.Store(1) // the first update is the admission
	resp := e.do(t, "POST", "/t/lost-answer/anthropic/v1/messages", anthropicReq(false, "hi"), hdr()...)
	if b := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var rec *trajectory.Record
	waitFor(t, "the turn settled", func() bool { rec = e.record(t, "lost-answer"); return rec.Turns == 1 })
	if rec.State != trajectory.Ready || rec.Reserved != (trajectory.Reservation{}) || len(rec.Children) != 0 || rec.Spend.Turns != 1 {
		t.Errorf("record %s reserved %+v children %v spend %+v", rec.State, rec.Reserved, rec.Children, rec.Spend)
	}
	begun := 0
	for _, ev := range e.events(t, "lost-answer") {
		if ev.Type == trajectory.EventTransition && ev.To == trajectory.CallingModel {
			begun++
		}
	}
	if begun != 1 {
		t.Errorf("%d transitions to CALLING_MODEL, want 1", begun)
	}
}

// TestUnreachableProviderRetryAfter: a provider gatekeeper cannot reach
// is a 502 that tells the agent when to retry.
func TestUnreachableProviderRetryAfter(t *testing.T) {
	e := newEnv(t, envOpts{upstream: "http://127.0.0.1:1"})
	resp := e.do(t, "POST", "/t/unreachable/anthropic/v1/messages", anthropicReq(false, "hi"), hdr()...)
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Retry-After") == "" {
		t.Errorf("status %d Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
}

// refusedRetryStore saves the first update and says its answer was lost,
// then fails the second before it reads the chain (the store restarting),
// as a Redis killed between its write and its reply does.
type refusedRetryStore struct {
	trajectory.Store
	n atomic.Int64
}

func (s *refusedRetryStore) UpdateChain(ctx context.Context, id string, fn func([]*trajectory.Record) ([]trajectory.Event, error)) ([]*trajectory.Record, error) {
	switch s.n.Add(1) {
	case 1:
		if _, err := s.Store.UpdateChain(ctx, id, fn); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("store: %w: reply lost", trajectory.ErrUnavailable)
	case 2:
		return nil, fmt.Errorf("store: %w: connection refused", trajectory.ErrUnavailable)
	}
	return s.Store.UpdateChain(ctx, id, fn)
}

// TestAdmissionAnswerLostRetryRefusedReleases: the admission is saved
// with its answer lost, and the admission sent again fails before it
// reaches the record. The agent gets a 503, and the saved reservation is
// given back: the record is READY with nothing reserved, not left in
// CALLING_MODEL for a sweep to charge as a turn nobody sent.
func TestAdmissionAnswerLostRetryRefusedReleases(t *testing.T) {
	rs := &refusedRetryStore{}
	e := newEnv(t, envOpts{wrap: func(s trajectory.Store) trajectory.Store { rs.Store = s; return rs }})
	resp := e.do(t, "POST", "/t/lost-refused/anthropic/v1/messages", anthropicReq(false, "hi"), hdr()...)
	if b := readAll(t, resp); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var rec *trajectory.Record
	waitFor(t, "the abandoned admission released", func() bool {
		rec = e.record(t, "lost-refused")
		return rec.State == trajectory.Ready
	})
	if rec.Call != "" || rec.Reserved != (trajectory.Reservation{}) || rec.Spend.Turns != 0 {
		t.Errorf("record %s call %q reserved %+v spend %+v", rec.State, rec.Call, rec.Reserved, rec.Spend)
	}
	if n := len(e.mock.Requests()); n != 0 {
		t.Errorf("%d requests forwarded", n)
	}
}

// slowLostStore saves the first update and, after taking spend of the
// store's time, says its answer was lost; it stalls the second until its
// context ends, noting how long that context gave it.
type slowLostStore struct {
	trajectory.Store
	spend time.Duration
	n     atomic.Int64
	given atomic.Int64 // the second update's time to its deadline, on arrival
}

func (s *slowLostStore) UpdateChain(ctx context.Context, id string, fn func([]*trajectory.Record) ([]trajectory.Event, error)) ([]*trajectory.Record, error) {
	switch s.n.Add(1) {
	case 1:
		if _, err := s.Store.UpdateChain(ctx, id, fn); err != nil {
			return nil, err
		}
		time.Sleep(s.spend)
		return nil, fmt.Errorf("store: %w: reply lost", trajectory.ErrUnavailable)
	case 2:
		if d, ok := ctx.Deadline(); ok {
			s.given.Store(int64(time.Until(d)))
		}
		<-ctx.Done()
		return nil, fmt.Errorf("store: %w (%w)", trajectory.ErrUnavailable, ctx.Err())
	}
	return s.Store.UpdateChain(ctx, id, fn)
}

// TestStoreTimeoutBoundsAdmission: store.timeout bounds the store calls
// that admit a turn together, not each: an admission whose answer was
// lost after most of store.timeout is sent again with only what is left
// of it, so the agent's 503 comes within store.timeout of its arrival,
// not after two of them.
func TestStoreTimeoutBoundsAdmission(t *testing.T) {
	const timeout, spend = time.Second, 600 * time.Millisecond
	ss := &slowLostStore{spend: spend}
	e := newEnv(t, envOpts{storeTimeout: timeout,
		wrap: func(s trajectory.Store) trajectory.Store { ss.Store = s; return ss }})
	resp := e.do(t, "POST", "/t/one-budget/anthropic/v1/messages", anthropicReq(false, "hi"), hdr()...)
	if b := readAll(t, resp); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ss.n.Load() != 2 {
		t.Fatalf("%d admission updates, want the update and its one retry", ss.n.Load())
	}
	// What is left is store.timeout less the first update's time: the
	// bound is half the time that update took short of store.timeout,
	// so a slow machine's gaps between calls do not decide the test.
	if given := time.Duration(ss.given.Load()); given <= 0 || given > timeout-spend/2 {
		t.Errorf("the retried update was given %v of store time; want what the first left of store.timeout %v (at most %v)", given, timeout, timeout-spend/2)
	}
}
