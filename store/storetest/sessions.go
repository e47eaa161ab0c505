package storetest

import (
	"context"
	"testing"
	"time"
)

// SessionStore is the console's session store, as both stores implement
// it.
type SessionStore interface {
	PutSession(ctx context.Context, key string, data []byte, ttl time.Duration) error
	GetSession(ctx context.Context, key string) ([]byte, bool, error)
	DeleteSession(ctx context.Context, key string) error
}

// RunSessions is the contract of a session store: a session is read back
// as written until it is deleted or expires. newStore returns an empty
// store; wait lets ttl pass (a real sleep for Redis, a clock's step for
// memory).
func RunSessions(t *testing.T, newStore func(t *testing.T) SessionStore, wait func(t *testing.T, d time.Duration)) {
	ctx := context.Background()
	t.Run("RoundTrip", func(t *testing.T) {
		s := newStore(t)
		if _, ok, err := s.GetSession(ctx, "k1"); ok || err != nil {
			t.Fatalf("an empty store has k1 (%v)", err)
		}
		if err := s.PutSession(ctx, "k1", []byte(`{"name":"carol"}`), time.Minute); err != nil {
			t.Fatal(err)
		}
		got, ok, err := s.GetSession(ctx, "k1")
		if err != nil || !ok || string(got) != `{"name":"carol"}` {
			t.Fatalf("get: %q %v %v", got, ok, err)
		}
		if _, ok, _ := s.GetSession(ctx, "k2"); ok {
			t.Fatal("k2 was never put")
		}
		if err := s.DeleteSession(ctx, "k1"); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := s.GetSession(ctx, "k1"); ok || err != nil {
			t.Fatalf("k1 after delete: %v %v", ok, err)
		}
		if err := s.DeleteSession(ctx, "k1"); err != nil {
			t.Fatalf("deleting twice: %v", err)
		}
	})
	t.Run("Expiry", func(t *testing.T) {
		s := newStore(t)
		if err := s.PutSession(ctx, "short", []byte("a"), 1100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := s.PutSession(ctx, "long", []byte("b"), time.Hour); err != nil {
			t.Fatal(err)
		}
		wait(t, 1500*time.Millisecond)
		if _, ok, err := s.GetSession(ctx, "short"); ok || err != nil {
			t.Fatalf("an expired session is still there (%v)", err)
		}
		if _, ok, err := s.GetSession(ctx, "long"); !ok || err != nil {
			t.Fatalf("a live session is gone (%v)", err)
		}
	})
}
