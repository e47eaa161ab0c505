package proxy_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"gatekeeper/config"
	"gatekeeper/trajectory"
)

// settleRefusingStore refuses, while refusing is set, the updates that
// would end a record's call (a settle), as a store that is unreachable
// for them; every other update (admission, the heartbeat) goes through.
type settleRefusingStore struct {
	trajectory.Store
	refusing atomic.Bool
	refused  atomic.Int64
}

func (s *settleRefusingStore) UpdateChain(ctx context.Context, id string, fn func([]*trajectory.Record) ([]trajectory.Event, error)) ([]*trajectory.Record, error) {
	if s.refusing.Load() {
		if rec, err := s.Store.Get(ctx, id); err == nil && rec.Call != "" {
			chain := []*trajectory.Record{rec.Clone()}
			for p := rec.ParentID; p != ""; {
				pr, err := s.Store.Get(ctx, p)
				if err != nil {
					break
				}
				chain = append(chain, pr)
				p = pr.ParentID
			}
			if _, err := fn(chain); err == nil && chain[0].Call == "" {
				s.refused.Add(1)
				return nil, trajectory.ErrUnavailable
			}
		}
	}
	return s.Store.UpdateChain(ctx, id, fn)
}

// A call whose reply ended while the store refused its charge is still
// this replica's: its heartbeat goes on (with the reply's output) while
// the charge is retried, so a sweep past the silence bound leaves it to
// the real charge rather than charge it as estimated.
func TestSweepWaitsForChargeRetries(t *testing.T) {
	rs := &settleRefusingStore{}
	e := newEnv(t, envOpts{wrap: func(s trajectory.Store) trajectory.Store { rs.Store = s; return rs }})
	e.px.StartSwept()
	ctx := context.Background()
	rs.refusing.Store(true)
	resp := e.do(t, "POST", "/t/wait-1/anthropic/v1/messages", anthropicReq(true, "go"), hdr("X-Mock-Turn", `{"kind":"text","deltas":8}`)...)
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	waitFor(t, "the charge refused", func() bool { return rs.refused.Load() > 0 })
	// The call's admission beat is now past the sweeper's bound.
	e.clk.advance(config.LostBeats*config.DefaultHeartbeat + time.Second)
	at := e.clk.Now()
	e.px.Beat(ctx)
	if rec := e.record(t, "wait-1"); rec.State != trajectory.CallingModel || rec.CallBeat.Before(at) || rec.CallOutput == 0 {
		t.Fatalf("after the beat: %s beat %v output %d; want the waiting call beaten now with its reply's output", rec.State, rec.CallBeat, rec.CallOutput)
	}
	if n := e.px.SweepCalls(ctx, false); n != 0 {
		t.Fatalf("the sweep took %d calls whose charge is being retried for lost", n)
	}
	rs.refusing.Store(false)
	var rec *trajectory.Record
	waitFor(t, "the retried charge", func() bool { rec = e.record(t, "wait-1"); return rec.State == trajectory.Ready })
	if rec.Turns != 1 || rec.Spend.Estimated || len(rec.SweptCalls) != 0 {
		t.Errorf("after the retry: turns %d spend %+v swept %+v; want one turn at its real charge", rec.Turns, rec.Spend, rec.SweptCalls)
	}
}

// A non-streamed call has no output to count while it runs: its beats
// report the output limit clamped to 100 tokens for each second since the
// turn began, the estimate a sweep would charge.
func TestBeatEstimatesNonStreamedOutput(t *testing.T) {
	e := newEnv(t, envOpts{realClock: true})
	e.px.StartSwept()
	done := make(chan int, 1)
	go func() {
		resp := e.do(t, "POST", "/t/json-1/anthropic/v1/messages", anthropicReq(false, "go"), hdr("X-Mock-Turn", `{"kind":"text","first_byte_delay":"2s"}`)...)
		readAll(t, resp)
		done <- resp.StatusCode
	}()
	waitFor(t, "the call in flight", func() bool {
		rec, err := e.store.Get(context.Background(), "json-1")
		return err == nil && rec.State == trajectory.CallingModel
	})
	for _, c := range []struct {
		after time.Duration
		want  int64
	}{{2 * time.Second, 200}, {60 * time.Second, 1024}} {
		e.clk.advance(c.after)
		e.px.Beat(context.Background())
		if rec := e.record(t, "json-1"); rec.State != trajectory.CallingModel || rec.CallOutput != c.want {
			t.Errorf("%v on: %s output %d; want %d", c.after, rec.State, rec.CallOutput, c.want)
		}
	}
	if code := <-done; code != 200 {
		t.Fatalf("the call: %d", code)
	}
}
