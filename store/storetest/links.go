package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"gatekeeper/trajectory"
)

// testLinks: a link is found until it expires, and a first link is never
// moved by a later one.
func testLinks(t *testing.T, s trajectory.Store) {
	l, ok := s.(trajectory.Links)
	if !ok {
		t.Fatalf("%T does not keep links (trajectory.Links)", s)
	}
	ctx := context.Background()
	if _, err := l.Linked(ctx, "k1"); !errors.Is(err, trajectory.ErrNotFound) {
		t.Fatalf("Linked of a key never linked: %v, want ErrNotFound", err)
	}
	if err := l.Link(ctx, "k1", "run-a", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := l.Link(ctx, "k1", "run-b", time.Hour); err != nil {
		t.Fatal(err)
	}
	if id, err := l.Linked(ctx, "k1"); err != nil || id != "run-a" {
		t.Fatalf("Linked = %q, %v; want the first link, run-a", id, err)
	}
	if err := l.Link(ctx, "k2", "run-c", 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := l.Linked(ctx, "k2")
		if errors.Is(err, trajectory.ErrNotFound) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("a link past its ttl: %v; want ErrNotFound within 5s", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := l.Link(ctx, "k2", "run-d", time.Hour); err != nil {
		t.Fatal(err)
	}
	if id, err := l.Linked(ctx, "k2"); err != nil || id != "run-d" {
		t.Fatalf("Linked after the first link expired = %q, %v; want run-d", id, err)
	}
}
