package redis

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"gatekeeper/internal/redistest"
	"gatekeeper/store/storetest"
	"gatekeeper/trajectory"
)

// stallDuring makes Redis stall (DEBUG SLEEP, which holds the server as
// a SIGSTOP does) while an admission's script is on its way: the caller
// gives up after 100 ms, and Redis reads the script when it wakes.
func stallDuring(t *testing.T, srv *redistest.Server, s *Store, id string, admit func([]*trajectory.Record) ([]trajectory.Event, error)) {
	t.Helper()
	admin := client(t, srv.URL)
	sleeping := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sleeping <- admin.Do(context.Background(), "DEBUG", "SLEEP", "0.5").Err()
	}()
	// The stall begins once DEBUG SLEEP is running; a PING from another
	// connection that cannot get through shows it.
	waitStalled(t, srv.URL, sleeping)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := s.UpdateChain(ctx, id, admit)
	cancel()
	if !errors.Is(err, trajectory.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("admission during the stall: %v, want unavailable", err)
	}
	wg.Wait()
	if err := <-sleeping; err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
}

// TestAdmissionAnswerLost has an admission's script run with its answer
// lost: the caller gave up, and Redis ran it anyway. Redis refuses an
// update it reads past its caller's deadline (TestLateUpdateRefused), so
// here this process takes Redis's clock for an hour ahead of its own, as
// if the script had run a moment before the deadline and its answer were
// lost on the way back. Nothing resends it. The admission sent again
// finds its own call and admits once; before call ids, it found the
// record busy with a phantom call and the client library's own retry
// made that phantom on its own.
func TestAdmissionAnswerLost(t *testing.T) {
	srv := redistest.StartServer(t, "--enable-debug-command", "local")
	s := open(t, srv.URL, Options{})
	s.clock.ahead.Store(time.Hour.Milliseconds())
	create(t, s, trajectory.New("run-1", "team-a", t0))
	create(t, s, child("run-1/a", "run-1"))
	res := trajectory.Reservation{Calls: 1, Tokens: 1000, Micros: 5000}
	admit := storetest.Admit("call-1", res, t0.Add(time.Second))

	stallDuring(t, srv, s, "run-1/a", admit)
	if got := mustGet(t, s, "run-1/a"); got.Call != "call-1" {
		t.Fatalf("the stalled admission was not saved when Redis woke (call %q): the test shows nothing", got.Call)
	}
	out, err := s.UpdateChain(context.Background(), "run-1/a", admit)
	if err != nil {
		t.Fatalf("the admission sent again: %v", err)
	}
	if out[0].State != trajectory.CallingModel || out[0].Call != "call-1" {
		t.Errorf("record in %s with call %q, want CALLING_MODEL with call-1", out[0].State, out[0].Call)
	}
	for _, id := range []string{"run-1/a", "run-1"} {
		if got := mustGet(t, s, id).Reserved; got != res {
			t.Errorf("%s reserves %+v, want one call's %+v", id, got, res)
		}
	}
}

// TestLateUpdateRefused stalls Redis while an admission is on its way, as
// a SIGSTOP of Redis does: its caller gives up (the agent got a 503), and
// when Redis wakes it refuses the update instead of saving a reservation
// for a call nobody makes, which the lost-call sweep would then charge.
func TestLateUpdateRefused(t *testing.T) {
	srv := redistest.StartServer(t, "--enable-debug-command", "local")
	s := open(t, srv.URL, Options{})
	create(t, s, trajectory.New("run-1", "team-a", t0))
	create(t, s, child("run-1/a", "run-1"))
	res := trajectory.Reservation{Calls: 1, Tokens: 1000, Micros: 5000}
	admit := storetest.Admit("call-1", res, t0.Add(time.Second))

	stallDuring(t, srv, s, "run-1/a", admit)
	// Read from Redis, not this process's cache.
	fresh := open(t, srv.URL, Options{})
	for _, id := range []string{"run-1/a", "run-1"} {
		got := mustGet(t, fresh, id)
		if got.Call != "" || got.State != trajectory.Ready || got.Reserved != (trajectory.Reservation{}) {
			t.Errorf("%s after the stall: %s, call %q, reserving %+v; want READY with nothing reserved", id, got.State, got.Call, got.Reserved)
		}
	}
	out, err := s.UpdateChain(context.Background(), "run-1/a", admit)
	if err != nil {
		t.Fatalf("the admission sent again: %v", err)
	}
	if out[0].State != trajectory.CallingModel || out[0].Call != "call-1" {
		t.Errorf("record in %s with call %q, want CALLING_MODEL with call-1", out[0].State, out[0].Call)
	}
}

// TestRedisClockAhead runs updates while this process takes Redis's clock
// for ten minutes behind its own, as a Redis host whose clock runs ahead
// looks: the first update is refused as late while its caller still
// waits, and is sent again with the difference learned; the next ones
// pass at once.
func TestRedisClockAhead(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, srv.URL, Options{})
	create(t, s, trajectory.New("run-1", "team-a", t0))
	const behind = 10 * time.Minute
	s.clock.ahead.Store(-behind.Milliseconds())
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := s.Update(ctx, "run-1", func(r *trajectory.Record) ([]trajectory.Event, error) {
			r.BindingDimension = string(rune('a' + i))
			return nil, nil
		})
		cancel()
		if err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
	}
	if got := mustGet(t, open(t, srv.URL, Options{}), "run-1").BindingDimension; got != "c" {
		t.Errorf("label %q after three updates, want c", got)
	}
	if got := time.Duration(s.clock.ahead.Load()) * time.Millisecond; got < -time.Second || got > time.Second {
		t.Errorf("learned Redis's clock %v ahead, want within a second of 0", got)
	}
}

// waitStalled returns once a PING to url goes unanswered for 50 ms, or
// fails t when the stall ended (sleeping answered) or never began.
func waitStalled(t *testing.T, url string, sleeping chan error) {
	t.Helper()
	// NewClient's client gives up at the context's deadline; a plain one
	// would wait out the stall and answer.
	c, err := NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 100 {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err != nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-sleeping:
		t.Fatalf("Redis kept answering PING: DEBUG SLEEP: %v", err)
	default:
	}
	t.Fatal("Redis kept answering PING: DEBUG SLEEP never started")
}

// TestUpdateOutOfTimeBehindTheTree has an update wait for its tree's
// lock, held by another update of the tree (as one waiting on a Redis
// that does not answer holds it), until its caller's deadline: the error
// says the store is unavailable, as the holder's own does, so that a
// settle is retried in the background instead of logged as lost. It was
// the bare context.DeadlineExceeded, and the charge of a reply delivered
// during a Redis stall was dropped.
func TestUpdateOutOfTimeBehindTheTree(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, srv.URL, Options{})
	create(t, s, trajectory.New("run-1", "team-a", t0))
	create(t, s, child("run-1/a", "run-1"))
	unlock, err := s.locks.lock(context.Background(), rootOf("run-1/a"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	admit := storetest.Admit("call-1", trajectory.Reservation{Calls: 1, Tokens: 1000, Micros: 5000}, t0.Add(time.Second))
	_, err = s.UpdateChain(ctx, "run-1/a", admit)
	if !errors.Is(err, trajectory.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("update out of time behind its tree's lock: %v, want ErrUnavailable and DeadlineExceeded", err)
	}
}

// TestUpdateAfterALostAnswerReadsRedis has an admission's script run with
// its answer lost (as TestAdmissionAnswerLost), then an update whose fn
// refuses unless the record holds the call, as the release of the
// abandoned admission does: it must see the call Redis saved, not the
// copy this process held before the lost answer. On that copy the release
// found no call, sent nothing, and the call stayed until a sweep charged
// it as a turn the provider never got.
func TestUpdateAfterALostAnswerReadsRedis(t *testing.T) {
	srv := redistest.StartServer(t, "--enable-debug-command", "local")
	s := open(t, srv.URL, Options{})
	s.clock.ahead.Store(time.Hour.Milliseconds())
	create(t, s, trajectory.New("run-1", "team-a", t0))
	create(t, s, child("run-1/a", "run-1"))
	admit := storetest.Admit("call-1", trajectory.Reservation{Calls: 1, Tokens: 1000, Micros: 5000}, t0.Add(time.Second))

	stallDuring(t, srv, s, "run-1/a", admit)
	errNotHeld := errors.New("the call is not held")
	var saw string
	_, err := s.UpdateChain(context.Background(), "run-1/a", func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		saw = chain[0].Call
		return nil, errNotHeld
	})
	if !errors.Is(err, errNotHeld) {
		t.Fatalf("update: %v, want the fn's refusal", err)
	}
	if saw != "call-1" {
		t.Errorf("the update after the lost answer saw call %q, want call-1 (what Redis saved)", saw)
	}
}
