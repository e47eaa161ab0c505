package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"gatekeeper/trajectory"
)

// child is a new child record id of parent.
func child(id, parent string) *trajectory.Record {
	c := trajectory.New(id, "team-a", t0)
	c.ParentID = parent
	return c
}

func testCreateChildBounded(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	mustCreate(t, s, trajectory.New("root", "team-a", t0))
	for _, id := range []string{"root/a", "root/b"} {
		if err := s.CreateChild(ctx, child(id, "root"), 2, ev(trajectory.EventCreated, "")); err != nil {
			t.Fatalf("CreateChild %s under the bound: %v", id, err)
		}
	}
	err := s.CreateChild(ctx, child("root/c", "root"), 2, ev(trajectory.EventCreated, ""))
	var full *trajectory.ChildrenFullError
	if !errors.As(err, &full) || full.Parent != "root" || full.Last != "root/b" || full.Max != 2 {
		t.Fatalf("a third child of two allowed: %v (%+v), want ChildrenFullError naming root/b", err, full)
	}
	if _, err := s.Get(ctx, "root/c"); !errors.Is(err, trajectory.ErrNotFound) {
		t.Errorf("refused child saved: %v", err)
	}
	if _, err := s.Events(ctx, "root/c", 0, 0); !errors.Is(err, trajectory.ErrNotFound) {
		t.Errorf("refused child's events saved: %v", err)
	}
	if got := mustGet(t, s, "root").Children; !slices.Equal(got, []string{"root/a", "root/b"}) {
		t.Errorf("root children after the refusal %v", got)
	}
	// A higher bound, or none, lets it in; the check is the parent's own.
	if err := s.CreateChild(ctx, child("root/c", "root"), 3); err != nil {
		t.Errorf("CreateChild under a bound of 3: %v", err)
	}
	if err := s.CreateChild(ctx, child("root/d", "root"), 0); err != nil {
		t.Errorf("CreateChild without a bound: %v", err)
	}
	if err := s.CreateChild(ctx, child("root/a/1", "root/a"), 1); err != nil {
		t.Errorf("a grandchild of a parent with no children: %v", err)
	}
	if err := s.CreateChild(ctx, child("root/a", "root"), 9); !errors.Is(err, trajectory.ErrExists) {
		t.Errorf("CreateChild of a taken id: %v, want ErrExists", err)
	}
	if err := s.CreateChild(ctx, child("nobody/x", "nobody"), 1); !errors.Is(err, trajectory.ErrNotFound) {
		t.Errorf("CreateChild under a missing parent: %v, want ErrNotFound", err)
	}
	if err := s.CreateChild(ctx, trajectory.New("lone", "team-a", t0), 1); !errors.Is(err, trajectory.ErrInvalidRecord) {
		t.Errorf("CreateChild of a root: %v, want ErrInvalidRecord", err)
	}
}

// testCreateChildAtomic: children created at once, each checking the
// bound, never pass it, and every one refused names a child that exists.
func testCreateChildAtomic(t *testing.T, s trajectory.Store) {
	ctx := context.Background()
	mustCreate(t, s, trajectory.New("wide", "team-a", t0))
	const n, bound = 24, 3
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = s.CreateChild(ctx, child(fmt.Sprintf("wide/t%d", i), "wide"), bound, ev(trajectory.EventCreated, ""))
		})
	}
	wg.Wait()
	kids := mustGet(t, s, "wide").Children
	created := 0
	for i, err := range errs {
		var full *trajectory.ChildrenFullError
		switch {
		case err == nil:
			created++
			if id := fmt.Sprintf("wide/t%d", i); !slices.Contains(kids, id) {
				t.Errorf("%s created but not among the parent's children %v", id, kids)
			}
		case errors.As(err, &full):
			if !slices.Contains(kids, full.Last) {
				t.Errorf("refusal names %q, not one of the parent's children %v", full.Last, kids)
			}
		default:
			t.Errorf("child %d: %v", i, err)
		}
	}
	if created != bound || len(kids) != bound {
		t.Errorf("%d concurrent children under a bound of %d: %d created, parent lists %v", n, bound, created, kids)
	}
}
