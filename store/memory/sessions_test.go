package memory_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"gatekeeper/store/memory"
	"gatekeeper/store/storetest"
)

type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *stepClock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestSessionsContract(t *testing.T) {
	clk := &stepClock{now: time.Unix(1_800_000_000, 0)}
	storetest.RunSessions(t, func(*testing.T) storetest.SessionStore {
		return memory.NewSessions(0, clk.Now)
	}, func(_ *testing.T, d time.Duration) { clk.step(d) })
}

// TestSessionsBounded: a full store refuses a new session until one
// expires.
func TestSessionsBounded(t *testing.T) {
	ctx := context.Background()
	clk := &stepClock{now: time.Unix(1_800_000_000, 0)}
	s := memory.NewSessions(2, clk.Now)
	for _, k := range []string{"a", "b"} {
		if err := s.PutSession(ctx, k, []byte(k), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutSession(ctx, "c", []byte("c"), time.Minute); !errors.Is(err, memory.ErrSessionsFull) {
		t.Fatalf("a third session in a store of two: %v", err)
	}
	if err := s.PutSession(ctx, "a", []byte("a2"), time.Minute); err != nil {
		t.Fatalf("rewriting a held session: %v", err)
	}
	clk.step(2 * time.Minute)
	if err := s.PutSession(ctx, "c", []byte("c"), time.Minute); err != nil {
		t.Fatalf("after the others expired: %v", err)
	}
}
