package redis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"gatekeeper/trajectory"
)

func cached(id, gen string, ver int64) *entry {
	return &entry{gen: gen, ver: ver, rec: trajectory.New(id, "team-a", t0)}
}

func TestCacheBounded(t *testing.T) {
	c := newCache(3)
	for i := range 10 {
		c.put(cached(fmt.Sprint("run-", i), "g", 1))
		if n := c.len(); n > 3 {
			t.Fatalf("after %d puts the cache holds %d entries, want at most 3", i+1, n)
		}
	}
	for i := range 7 {
		if e := c.get(fmt.Sprint("run-", i)); e != nil {
			t.Errorf("run-%d kept past the bound", i)
		}
	}
	// A read makes an entry the most recently used: the next put evicts
	// another.
	if c.get("run-7") == nil {
		t.Fatal("run-7 evicted too early")
	}
	c.put(cached("run-10", "g", 1))
	if c.get("run-7") == nil || c.get("run-8") != nil {
		t.Errorf("eviction did not drop the least recently used entry")
	}
	if n := newCache(0).max; n != DefaultCacheEntries {
		t.Errorf("default size %d, want %d", n, DefaultCacheEntries)
	}
}

func TestCachePut(t *testing.T) {
	tests := []struct {
		name     string
		first    *entry
		then     *entry
		wantGen  string
		wantVers int64
	}{
		{"newer version replaces", cached("r", "g", 3), cached("r", "g", 4), "g", 4},
		{"older version of the same record is ignored", cached("r", "g", 4), cached("r", "g", 3), "g", 4},
		{"same version replaces", cached("r", "g", 4), cached("r", "g", 4), "g", 4},
		{"another generation replaces, whatever its version", cached("r", "g", 9), cached("r", "h", 1), "h", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(8)
			c.put(tc.first)
			c.put(tc.then)
			got := c.get("r")
			if got == nil || got.gen != tc.wantGen || got.ver != tc.wantVers {
				t.Errorf("cache holds %+v, want gen %s ver %d", got, tc.wantGen, tc.wantVers)
			}
			c.drop("r", "absent")
			if c.get("r") != nil || c.len() != 0 {
				t.Errorf("drop left %d entries", c.len())
			}
		})
	}
}

func TestEntryTag(t *testing.T) {
	if got := cached("r", "k3x", 12).tag(); got != "k3x:12" {
		t.Errorf("tag %q", got)
	}
	// A record saved before gens existed compares as an empty gen.
	if got := cached("r", "", 2).tag(); got != ":2" {
		t.Errorf("tag without gen %q", got)
	}
}

func TestTreeLocks(t *testing.T) {
	l := newTreeLocks()
	ctx := context.Background()
	unlock, err := l.lock(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	// Another tree is not held up.
	other, err := l.lock(ctx, "run-2")
	if err != nil {
		t.Fatal(err)
	}
	other()

	// A waiter gives up with its context.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := l.lock(wctx, "run-1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("lock of a held tree: %v, want DeadlineExceeded", err)
	}

	// A waiter gets the lock once it is released.
	got := make(chan error, 1)
	go func() {
		u, err := l.lock(ctx, "run-1")
		if err == nil {
			u()
		}
		got <- err
	}()
	unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter never got the released lock")
	}
	if n := l.len(); n != 0 {
		t.Errorf("%d trees still held after every holder left", n)
	}
}
