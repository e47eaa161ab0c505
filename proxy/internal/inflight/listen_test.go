package inflight

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"gatekeeper/store/memory"
	"gatekeeper/trajectory"
)

// TestListen: a signal published on the store reaches the registry's
// waiters while Listen runs, and Listen returns when its context ends.
func TestListen(t *testing.T) {
	sigs := memory.New(memory.Options{})
	r := New[*call]()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Listen(ctx, sigs, slog.New(slog.DiscardHandler)) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Listen did not return after its context ended")
		}
	}()

	woken, stop := r.Wait("run/a")
	defer stop()
	// The subscription may not be up yet when the first signal goes out:
	// publish until the waiter wakes, for at most 5 s.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(5 * time.Second)
	for {
		if err := sigs.Publish(ctx, trajectory.Signal{ID: "run/a", Kind: trajectory.ControlPause}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-woken:
			return
		case <-tick.C:
		case <-limit:
			t.Fatal("the published signal never reached the waiter")
		}
	}
}
