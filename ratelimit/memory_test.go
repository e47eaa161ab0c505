package ratelimit

import (
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestMemoryContract(t *testing.T) {
	runContract(t, func(t *testing.T) harness {
		clk := newFakeClock()
		m := NewMemory(clk.Now)
		origin := clk.Now()
		tat := func(t *testing.T, k Key, d int) float64 {
			m.mu.Lock()
			defer m.mu.Unlock()
			st, ok := m.keys[k.ID]
			if !ok || st.buckets[d] == nil {
				t.Fatalf("key %s has no bucket in dimension %d", k.ID, d)
			}
			g := st.buckets[d]
			return float64(g.tat.Sub(origin)) + g.frac
		}
		return harness{b: m, advance: clk.Advance, tat: tat}
	})
}

// TestMemoryRefill checks refill exactly, which the fake clock allows.
func TestMemoryRefill(t *testing.T) {
	tests := []struct {
		name   string
		limits Limits
		cost   Cost
		after  time.Duration
		want   int
	}{
		{"requests a second", Limits{RPM: 60}, Cost{Requests: 1}, time.Second, 1},
		{"requests ten seconds", Limits{RPM: 60}, Cost{Requests: 1}, 10 * time.Second, 10},
		{"input tokens", Limits{InputTPM: 6000}, Cost{Input: 10}, 3 * time.Second, 30},
		{"output tokens", Limits{OutputTPM: 600}, Cost{Output: 5}, 2 * time.Second, 4},
		{"never above the burst", Limits{RPM: 60}, Cost{Requests: 1}, time.Hour, 60},
		{"tightest dimension", Limits{RPM: 600, InputTPM: 60}, Cost{Requests: 1, Input: 1}, 5 * time.Second, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			m := NewMemory(clk.Now)
			k := Key{ID: "p/k", Limits: minute(tc.limits)}
			takeAll(t, m, k, tc.cost, 1e6)
			clk.Advance(tc.after)
			if n := takeAll(t, m, k, tc.cost, 1e6); n != tc.want {
				t.Fatalf("%s after emptying: %d fit, want %d", tc.after, n, tc.want)
			}
		})
	}
}

// TestMemoryLimitsChange checks that a key's new limits (a configuration
// reload) apply at once.
func TestMemoryLimitsChange(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	k := Key{ID: "p/k", Limits: minute(Limits{RPM: 10})}
	if n := takeAll(t, m, k, Cost{Requests: 1}, 100); n != 10 {
		t.Fatalf("rpm 10: %d fit", n)
	}
	k.Limits = Limits{}
	if ok, _ := mustTake(t, m, k, Cost{Requests: 1}); !ok {
		t.Fatal("a key whose limit was lifted refused a take")
	}
	k.Limits = minute(Limits{RPM: 5})
	if n := takeAll(t, m, k, Cost{Requests: 1}, 100); n != 5 {
		t.Fatalf("a newly limited key of rpm 5: %d fit, want 5", n)
	}
}
