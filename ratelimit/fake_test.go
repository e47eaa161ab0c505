package ratelimit

import (
	"context"
	"sync"
	"testing"
	"time"
)

// gateBuckets is a test double of Buckets that admits only as many takes
// as the test opens, and records them.
type gateBuckets struct {
	mu      sync.Mutex
	open    int           // takes that may still succeed
	wait    time.Duration // what a refused take reports
	taken   []Cost        // admitted takes, in order
	calls   int           // every Take
	adjusts []Cost
	cools   map[string]time.Duration
}

var _ Buckets = (*gateBuckets)(nil)

func newGate(wait time.Duration) *gateBuckets {
	return &gateBuckets{wait: wait, cools: make(map[string]time.Duration)}
}

func (g *gateBuckets) Take(ctx context.Context, k Key, c Cost) (bool, time.Duration, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	if g.open <= 0 {
		return false, g.wait, nil
	}
	g.open--
	g.taken = append(g.taken, c)
	return true, 0, nil
}

func (g *gateBuckets) Headroom(ctx context.Context, k Key) (float64, error) { return 0.5, nil }

func (g *gateBuckets) Cool(ctx context.Context, k Key, d time.Duration) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cools[k.ID] = d
	return nil
}

func (g *gateBuckets) Settle(ctx context.Context, k Key, delta Cost, r Remaining) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.adjusts = append(g.adjusts, delta)
	return nil
}

func (g *gateBuckets) setOpen(n int) {
	g.mu.Lock()
	g.open = n
	g.mu.Unlock()
}

func (g *gateBuckets) takes() []Cost {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Cost(nil), g.taken...)
}

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu       sync.Mutex
	lengths  map[string]int
	waits    map[string][]time.Duration
	headroom map[string]float64
}

var _ Observer = (*recorder)(nil)

func newRecorder() *recorder {
	return &recorder{lengths: map[string]int{}, waits: map[string][]time.Duration{}, headroom: map[string]float64{}}
}

func (r *recorder) QueueLength(class string, n int) {
	r.mu.Lock()
	r.lengths[class] = n
	r.mu.Unlock()
}

func (r *recorder) QueueWait(class string, d time.Duration) {
	r.mu.Lock()
	r.waits[class] = append(r.waits[class], d)
	r.mu.Unlock()
}

func (r *recorder) Headroom(key string, f float64) {
	r.mu.Lock()
	r.headroom[key] = f
	r.mu.Unlock()
}

// waitQueued waits until class has n turns queued in s, at most 5s.
func waitQueued(t *testing.T, s *Scheduler, class string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		got := s.length[class]
		s.mu.Unlock()
		if got == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%s: %d turns never queued", class, n)
}

// pools is the number of pools with waiting turns.
func pools(s *Scheduler) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pools)
}
