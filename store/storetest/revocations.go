package storetest

import (
	"context"
	"testing"
	"time"

	"gatekeeper/signin"
)

// RunRevocations is the contract of signin.Revocations. newStore returns
// an empty store on clock now; the suite moves the clock it passes only
// for stores that read it (Redis expires keys on its own clock, so its
// expiry case uses a deadline a second away and waits for it).
func RunRevocations(t *testing.T, newStore func(t *testing.T, now func() time.Time) signin.Revocations) {
	ctx := context.Background()
	t.Run("RevokedUntilExpiry", func(t *testing.T) {
		s := newStore(t, time.Now)
		until := time.Now().Add(1500 * time.Millisecond)
		if err := s.Revoke(ctx, "tok-a", until); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			key  string
			want bool
		}{{"tok-a", true}, {"tok-b", false}} {
			got, err := s.Revoked(ctx, c.key)
			if err != nil || got != c.want {
				t.Fatalf("Revoked(%s) = %v, %v; want %v", c.key, got, err, c.want)
			}
		}
		time.Sleep(time.Until(until) + 200*time.Millisecond)
		if got, err := s.Revoked(ctx, "tok-a"); err != nil || got {
			t.Fatalf("Revoked after its expiry = %v, %v; want false", got, err)
		}
	})
	t.Run("PastDeadlineIgnored", func(t *testing.T) {
		s := newStore(t, time.Now)
		if err := s.Revoke(ctx, "tok-old", time.Now().Add(-time.Minute)); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Revoked(ctx, "tok-old"); err != nil || got {
			t.Fatalf("a token revoked past its expiry is marked: %v, %v", got, err)
		}
	})
	t.Run("CanceledContext", func(t *testing.T) {
		s := newStore(t, time.Now)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.Revoke(cctx, "tok-c", time.Now().Add(time.Hour)); err == nil {
			t.Error("Revoke with a canceled context succeeded")
		}
		if _, err := s.Revoked(cctx, "tok-c"); err == nil {
			t.Error("Revoked with a canceled context succeeded")
		}
	})
}
