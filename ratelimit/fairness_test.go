package ratelimit

import (
	"context"
	"maps"
	"math"
	"slices"
	"sync"
	"testing"
	"time"
)

// cycles hears the scheduler's queue lengths and the takes of a key
// (through countingBuckets) and counts the tokens each class was admitted
// in the cycles of the round-robin during which every class was
// backlogged. With the weights 4:2:1 and batch turns of two rounds' batch
// credit, a cycle runs from one batch take to the next: two rounds, in
// which each class is served its weight's share of the tokens exactly,
// provided its queue never emptied. A cycle counts when no queue was empty
// at any point of it nor of the cycle before: a class whose queue empties
// takes less than its weight by design (the scheduler gives what it leaves
// to the others), and in the next cycle it may spend the credit it kept
// (creditGrace). Such cycles show how fast the workers came back, not the
// weights.
type cycles struct {
	class map[int64]string // a turn's class by its input tokens

	mu      sync.Mutex
	length  map[string]int
	inCycle map[string]int64 // tokens taken in this cycle
	served  map[string]int64 // in counted cycles
	counted int
	other   int  // cycles not counted
	full    bool // no queue was empty in this cycle
	prev    bool // nor in the cycle before
}

var _ Observer = (*cycles)(nil)

func newCycles(size map[string]int64) *cycles {
	c := &cycles{class: map[int64]string{}, length: map[string]int{},
		inCycle: map[string]int64{}, served: map[string]int64{}}
	for class, n := range size {
		c.class[n] = class
		c.length[class] = 0
	}
	return c
}

// taken counts an admitted take; a batch take ends the cycle.
func (c *cycles) taken(cost Cost) {
	c.mu.Lock()
	defer c.mu.Unlock()
	class := c.class[cost.Input]
	c.inCycle[class] += cost.Input
	if class != Batch {
		return
	}
	if c.full && c.prev {
		for cl, n := range c.inCycle {
			c.served[cl] += n
		}
		c.counted++
	} else {
		c.other++
	}
	clear(c.inCycle)
	c.full, c.prev = true, c.full
	c.check()
}

func (c *cycles) QueueLength(class string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.length[class] = n
	c.check()
}

// check ends the cycle's fullness if a queue is empty. c.mu is held.
func (c *cycles) check() {
	for _, n := range c.length {
		c.full = c.full && n > 0
	}
}

func (c *cycles) QueueWait(string, time.Duration) {}

func (c *cycles) Headroom(string, float64) {}

// count is the cycles counted and not counted, and the tokens served per
// class in the counted ones.
func (c *cycles) count() (counted, other int, served map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counted, c.other, maps.Clone(c.served)
}

// countingBuckets passes to Memory and tells c of every admitted take. It
// does not embed Memory, whose one-step take-and-headroom would bypass the
// counting Take.
type countingBuckets struct {
	m *Memory
	c *cycles
}

var _ Buckets = countingBuckets{}

func (b countingBuckets) Headroom(ctx context.Context, k Key) (float64, error) {
	return b.m.Headroom(ctx, k)
}

func (b countingBuckets) Cool(ctx context.Context, k Key, d time.Duration) error {
	return b.m.Cool(ctx, k, d)
}

func (b countingBuckets) Settle(ctx context.Context, k Key, d Cost, rem Remaining) error {
	return b.m.Settle(ctx, k, d, rem)
}

func (b countingBuckets) Take(ctx context.Context, k Key, c Cost) (bool, time.Duration, error) {
	ok, wait, err := b.m.Take(ctx, k, c)
	if ok {
		b.c.taken(c)
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
// its tokens 4:2:1, whatever their turns' sizes. Backlogged means no
// class's queue is empty: the shares are judged on the cycles of the
// round-robin in which every class stayed backlogged (see cycles), not
// over the whole run, where a worker that a loaded machine holds back
// leaves its class's queue empty and the others take what it leaves. The
// run goes on until wantCycles such cycles.
func TestFairnessShares(t *testing.T) {
	if testing.Short() {
		t.Skip("a 2s simulation")
	}
	const (
		// wantCycles cycles of 14000 tokens: about 1.5 s at the key's
		// 200000 tokens a second, on a quiet machine.
		wantCycles = 20
		limit      = 60 * time.Second
	)
	size := map[string]int64{Interactive: 500, Standard: 1000, Batch: 2000}
	cyc := newCycles(size)
	m := NewMemory(nil)
	k := drained(t, m, "p/k", 200000)
	s := New(Options{Buckets: countingBuckets{m: m, c: cyc}, MaxWait: time.Minute, Observer: cyc})
	defer s.Close()

	stop := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(stop)
		for time.Since(start) < limit {
			if n, _, _ := cyc.count(); n >= wantCycles {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	load(t, s, []Key{k}, map[string]int{Interactive: 20, Standard: 10, Batch: 10}, size, stop)

	counted, other, served := cyc.count()
	t.Logf("%d cycles with every class backlogged (%d other cycles) in %s", counted, other, time.Since(start).Round(10*time.Millisecond))
	if counted < wantCycles {
		t.Fatalf("%d cycles with every class backlogged in %s (%d other cycles), want %d", counted, limit, other, wantCycles)
	}
	var total int64
	for _, n := range served {
		total += n
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
