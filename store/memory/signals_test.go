package memory

import (
	"context"
	"testing"
	"time"

	"gatekeeper/trajectory"
)

func TestSignals(t *testing.T) {
	s := New(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	a, err := s.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Subscribe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := trajectory.Signal{ID: "run-1/ab", Kind: trajectory.ControlCancel}
	if err := s.Publish(context.Background(), want); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan trajectory.Signal{"a": a, "b": b} {
		select {
		case got := <-ch:
			if got != want {
				t.Errorf("%s got %+v, want %+v", name, got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s got nothing", name)
		}
	}
	cancel()
	select {
	case _, ok := <-a:
		if ok {
			t.Error("a signal after unsubscribing")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed when its context ended")
	}
	// A subscriber that never reads does not block publishers.
	for i := range signalBuffer + 10 {
		if err := s.Publish(context.Background(), trajectory.Signal{ID: "x", Kind: trajectory.ControlKill}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if n := len(b); n != signalBuffer {
		t.Errorf("stalled subscriber holds %d signals, want its buffer %d", n, signalBuffer)
	}
}
