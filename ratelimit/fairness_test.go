package ratelimit

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"
	"time"
)

// recordingBuckets passes to Memory and keeps the admitted takes in the
// order the key saw them. It does not embed Memory, whose one-step
// take-and-headroom would bypass the recording Take.
type recordingBuckets struct {
	m     *Memory
	mu    sync.Mutex
	taken []Cost
}

var _ Buckets = (*recordingBuckets)(nil)

func (r *recordingBuckets) Headroom(ctx context.Context, k Key) (float64, error) {
	return r.m.Headroom(ctx, k)
}

func (r *recordingBuckets) Cool(ctx context.Context, k Key, d time.Duration) error {
	return r.m.Cool(ctx, k, d)
}

func (r *recordingBuckets) Settle(ctx context.Context, k Key, d Cost, rem Remaining) error {
	return r.m.Settle(ctx, k, d, rem)
}

func (r *recordingBuckets) Take(ctx context.Context, k Key, c Cost) (bool, time.Duration, error) {
	ok, wait, err := r.m.Take(ctx, k, c)
	if ok {
		r.mu.Lock()
		r.taken = append(r.taken, c)
		r.mu.Unlock()
	}
	return ok, wait, err
}

// drained is a key of perSecond input tokens whose bucket is empty, so
// that the simulation runs saturated from the start.
func drained(t *testing.T, m *Memory, id string, perSecond int64) Key {
	k := Key{ID: id, Limits: minute(Limits{InputTPM: perSecond * 60})}
	if ok, _ := mustTake(t, m, k, Cost{Input: k.Limits.InputTPM}); !ok {
		t.Fatal("could not drain the key")
	}
	return k
}

// load runs closed-loop turns of each class against s on keys until
// stop: each of n[class] workers acquires a turn of size[class] tokens,
// finishes it at once, and acquires again. It returns the waits of the
// admitted turns per class.
func load(t *testing.T, s *Scheduler, keys []Key, n map[string]int, size map[string]int64, stop <-chan struct{}) map[string][]time.Duration {
	var (
		mu    sync.Mutex
		waits = map[string][]time.Duration{}
		wg    sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for class, workers := range n {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					g, err := s.Acquire(ctx, class, keys, Cost{Requests: 1, Input: size[class]})
					if err != nil {
						if ctx.Err() == nil {
							t.Errorf("%s: %v", class, err)
						}
						return
					}
					g.Done(ctx, g.est)
					mu.Lock()
					waits[class] = append(waits[class], g.Waited)
					mu.Unlock()
				}
			}()
		}
	}
	<-stop
	cancel()
	wg.Wait()
	return waits
}

func p99(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*99)/100]
}

// TestFairnessInteractiveOverBatch: 50 batch workers with large turns and
// 5 interactive workers with small ones on one saturated key. Interactive
// turns must wait far less (p99 at least 4× lower).
func TestFairnessInteractiveOverBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("a 2s simulation")
	}
	m := NewMemory(nil)
	k := drained(t, m, "p/k", 300000)
	s := New(Options{Buckets: m, MaxWait: time.Minute})
	defer s.Close()

	stop := make(chan struct{})
	time.AfterFunc(2*time.Second, func() { close(stop) })
	waits := load(t, s, []Key{k},
		map[string]int{Batch: 50, Interactive: 5},
		map[string]int64{Batch: 6000, Interactive: 300}, stop)

	bi, bb := waits[Interactive], waits[Batch]
	if len(bi) < 20 || len(bb) < 5 {
		t.Fatalf("too few turns to judge: %d interactive, %d batch", len(bi), len(bb))
	}
	pi, pb := p99(bi), p99(bb)
	t.Logf("p99 wait: interactive %s over %d turns, batch %s over %d turns", pi, len(bi), pb, len(bb))
	if pi*4 > pb {
		t.Errorf("interactive p99 wait %s is not 4× below batch's %s", pi, pb)
	}
	// Five small interactive turns hold less than a round's credit
	// (1500 of 4000 tokens), so the class is backlogged only while its
	// workers come back fast enough: its share is logged, not judged
	// (TestFairnessShares judges backlogged classes).
	ti, tb := float64(len(bi)*300), float64(len(bb)*6000)
	t.Logf("interactive got %.3f of the tokens (0.8 when backlogged throughout)", ti/(ti+tb))
}

// TestFairnessShares: three backlogged classes on one saturated key share
// its tokens 4:2:1, whatever their turns' sizes. Backlogged means each
// class has more tokens waiting than a round's credit (Quantum×weight).
func TestFairnessShares(t *testing.T) {
	if testing.Short() {
		t.Skip("a 2s simulation")
	}
	rec := &recordingBuckets{m: NewMemory(nil)}
	k := drained(t, rec.m, "p/k", 200000)
	s := New(Options{Buckets: rec, MaxWait: time.Minute})
	defer s.Close()

	size := map[string]int64{Interactive: 500, Standard: 1000, Batch: 2000}
	stop := make(chan struct{})
	time.AfterFunc(2*time.Second, func() { close(stop) })
	load(t, s, []Key{k}, map[string]int{Interactive: 20, Standard: 10, Batch: 10}, size, stop)

	class := map[int64]string{}
	for c, n := range size {
		class[n] = c
	}
	// Judge the middle of the run, away from the start (workers
	// arriving) and the end (workers leaving).
	rec.mu.Lock()
	taken := rec.taken
	rec.mu.Unlock()
	if len(taken) < 200 {
		t.Fatalf("only %d turns admitted", len(taken))
	}
	served := map[string]int64{}
	var total int64
	for _, c := range taken[len(taken)/5 : len(taken)*4/5] {
		served[class[c.Input]] += c.Input
		total += c.Input
	}
	want := map[string]float64{Interactive: 4.0 / 7, Standard: 2.0 / 7, Batch: 1.0 / 7}
	for c, w := range want {
		got := float64(served[c]) / float64(total)
		t.Logf("%s: %.3f of the tokens, want %.3f", c, got, w)
		if math.Abs(got-w) > 0.1*w {
			t.Errorf("%s got %.3f of the tokens, want %.3f within 10%%", c, got, w)
		}
	}
}
