package inflight

import (
	"testing"
	"time"

	"gatekeeper/trajectory"
)

type call struct {
	id  string
	got []trajectory.ControlKind
}

func (c *call) Record() string                   { return c.id }
func (c *call) Control(k trajectory.ControlKind) { c.got = append(c.got, k) }

func TestRegistry(t *testing.T) {
	r := New[*call]()
	a, b := &call{id: "run/a"}, &call{id: "run/b"}
	r.Add(a)
	r.Add(b)
	if n := len(r.All()); n != 2 {
		t.Fatalf("All = %d calls, want 2", n)
	}
	woken, stop := r.Wait("run/a")
	defer stop()
	other, stopOther := r.Wait("run/b")
	r.Signal(trajectory.Signal{ID: "run/a", Kind: trajectory.ControlCancel})
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter on run/a was not woken")
	}
	select {
	case <-other:
		t.Fatal("the waiter on run/b was woken by run/a's signal")
	default:
	}
	stopOther()
	if len(a.got) != 1 || a.got[0] != trajectory.ControlCancel || len(b.got) != 0 {
		t.Fatalf("controls: a %v, b %v; want a cancel on a only", a.got, b.got)
	}

	// A later call on the same record replaces a; a's removal leaves it.
	a2 := &call{id: "run/a"}
	r.Add(a2)
	r.Remove(a)
	r.Signal(trajectory.Signal{ID: "run/a", Kind: trajectory.ControlKill})
	if len(a2.got) != 1 || a2.got[0] != trajectory.ControlKill {
		t.Fatalf("the replacing call got %v, want a kill", a2.got)
	}
	r.Remove(a2)
	r.Remove(b)
	if n := len(r.All()); n != 0 {
		t.Fatalf("All after removing every call = %d, want 0", n)
	}
}
