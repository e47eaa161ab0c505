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

// TestAdmissionAnswerLost makes Redis stall while an admission's script is
// on its way (DEBUG SLEEP, which holds the server as a SIGSTOP does): the
// caller gives up, the script runs when Redis wakes, and nothing resends
// it. The admission sent again finds its own call and admits once; before
// call ids, it found the record busy with a phantom call and the client
// library's own retry made that phantom on its own.
func TestAdmissionAnswerLost(t *testing.T) {
	srv := redistest.StartServer(t, "--enable-debug-command", "local")
	s := open(t, srv.URL, Options{})
	create(t, s, trajectory.New("run-1", "team-a", t0))
	create(t, s, child("run-1/a", "run-1"))
	res := trajectory.Reservation{Calls: 1, Tokens: 1000, Micros: 5000}
	admit := storetest.Admit("call-1", res, t0.Add(time.Second))

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
	_, err := s.UpdateChain(ctx, "run-1/a", admit)
	cancel()
	if !errors.Is(err, trajectory.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("admission during the stall: %v, want unavailable", err)
	}
	wg.Wait()
	if err := <-sleeping; err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}

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
