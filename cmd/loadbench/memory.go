package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// heapSample is the process's live heap and goroutines after a full GC.
type heapSample struct {
	alloc      int64 // MemStats.HeapAlloc: bytes of live objects
	inuse      int64 // MemStats.HeapInuse: bytes of spans holding them
	goroutines int
}

func sample() heapSample {
	// Twice: objects freed by finalizers in the first cycle go in the second.
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return heapSample{alloc: int64(ms.HeapAlloc), inuse: int64(ms.HeapInuse), goroutines: runtime.NumGoroutine()}
}

// quiesce closes every idle connection (client → proxies, proxies → mock)
// and waits until the goroutine count is steady, so that a heap sample
// holds no connection pooled by an earlier phase.
func (b *bench) quiesce(ctx context.Context) error {
	for _, tr := range b.transports {
		tr.CloseIdleConnections()
	}
	last, steady := runtime.NumGoroutine(), 0
	for range 300 { // 3 s at most
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
		n := runtime.NumGoroutine()
		if n == last {
			steady++
		} else {
			last, steady = n, 0
		}
		if steady == 5 {
			return nil
		}
	}
	return nil // still moving: the sample is noisier, not wrong
}

// holdStats is the heap and goroutines one target adds per open stream.
type holdStats struct {
	streams       int
	open          int // streams that had their first event at the sample
	heapPer       float64
	inusePer      float64
	goroutinesPer float64
	errs          int
	truncated     int
	firstErr      string
}

func (s *holdStats) fail(err error) {
	if s.errs == 0 {
		s.firstErr = err.Error()
	}
	s.errs++
}

// holdDelay is the mock's wait after each stream's first event in the
// memory phase; the gate cuts it short once the sample is taken.
const holdDelay = 2 * time.Minute

// holdPhase opens -streams streams through tg, samples the heap once every
// one of them has delivered its first event (all open, all idle between
// events), then lets them finish.
func (b *bench) holdPhase(ctx context.Context, tg target) (holdStats, error) {
	s := holdStats{streams: b.p.streams}
	b.mock.Reset()
	if err := b.quiesce(ctx); err != nil {
		return s, err
	}
	base := sample()

	b.gate.arm()
	defer b.gate.disarm()
	ctx, cancel := context.WithTimeout(ctx, holdDelay+time.Minute)
	defer cancel()
	turn := b.streamTurn(holdDelay)
	// Each stream reports once: true with its first event, false if it
	// ended without one.
	opened := make(chan bool, b.p.streams)
	outs := make([]streamOutcome, b.p.streams)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Go(func() {
			var once sync.Once
			first := func() { once.Do(func() { opened <- true }) }
			outs[i] = b.openStream(ctx, tg, fmt.Sprintf("hold-%s-%d", tg.name, i), turn, first)
			once.Do(func() { opened <- false })
		})
	}
	wait := time.NewTimer(time.Minute)
	defer wait.Stop()
wait:
	for range b.p.streams {
		select {
		case ok := <-opened:
			if ok {
				s.open++
			}
		case <-wait.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	var held heapSample
	if s.open > 0 {
		held = sample()
	}
	b.gate.release()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return s, fmt.Errorf("held streams through %s: %w", tg.name, err)
	}
	if s.open < s.streams {
		s.fail(fmt.Errorf("%s: only %d of %d streams were open at the sample", tg.name, s.open, s.streams))
	}
	if s.open > 0 {
		n := float64(s.open)
		s.heapPer = float64(held.alloc-base.alloc) / n
		s.inusePer = float64(held.inuse-base.inuse) / n
		s.goroutinesPer = float64(held.goroutines-base.goroutines) / n
	}
	for _, o := range outs {
		if !o.stop {
			s.truncated++
		}
		if o.err != nil {
			s.fail(o.err)
		}
	}
	return s, nil
}

// recordStats is the heap of idle trajectory records.
type recordStats struct {
	records   int
	perRecord float64 // HeapAlloc delta per record
	inusePer  float64
	errs      int
	firstErr  string
}

// recordPhase creates -records trajectory records the way agents do: one
// small turn each through gatekeeper, each on its own trajectory, so each
// record carries the events of its creation and of one whole turn. The
// heap is sampled before and after with the mock's request log emptied and
// idle connections closed, so the difference is the store's.
func (b *bench) recordPhase(ctx context.Context) (recordStats, error) {
	s := recordStats{records: b.p.records}
	b.mock.Reset()
	if err := b.quiesce(ctx); err != nil {
		return s, err
	}
	base := sample()

	gk := b.targets[gkIdx]
	body := messagesBody(false, "one turn")
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range min(b.p.conns, b.p.records) {
		wg.Go(func() {
			// Each worker takes the next record number until all are made.
			for i := next.Add(1) - 1; i < int64(b.p.records) && ctx.Err() == nil; i = next.Add(1) - 1 {
				forked, err := b.smallTurn(ctx, gk, body, fmt.Sprintf("bench-record-%d", i))
				if err == nil && forked {
					// One turn per trajectory cannot find its thread busy.
					err = fmt.Errorf("record %d: turn forked a sibling thread", i)
				}
				if err != nil {
					mu.Lock()
					if s.errs == 0 {
						s.firstErr = err.Error()
					}
					s.errs++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return s, err
	}
	b.mock.Reset()
	if err := b.quiesce(ctx); err != nil {
		return s, err
	}
	after := sample()
	s.perRecord = float64(after.alloc-base.alloc) / float64(b.p.records)
	s.inusePer = float64(after.inuse-base.inuse) / float64(b.p.records)
	return s, nil
}
