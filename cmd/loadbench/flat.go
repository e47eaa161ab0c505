package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The flat-cost scenarios: what a turn costs gatekeeper should not grow
// with a trajectory's length, the records stored, or the live event
// stream's subscribers. Each measures small turns before and after, with
// the bare proxy's rounds beside them as the machine's noise.

// deepWindow is how many turns of each trajectory are timed at its start
// and at its end.
const deepWindow = 100

// deepTimeout bounds each step of the deep scenario.
const deepTimeout = 10 * time.Minute

// deepStats is the deep scenario: early is turns 1..window of fresh
// trajectories, late the last window before -deep-turns.
type deepStats struct {
	turns, window int
	early, late   [2]stats
	drive         stats // gatekeeper's turns between the windows, untimed
}

// deepPhase drives -deep-trajectories trajectories, each by one worker, to
// -deep-turns turns through gatekeeper, timing the first and the last
// window; the bare proxy's windows run beside each.
func (b *bench) deepPhase(ctx context.Context) (deepStats, error) {
	d := deepStats{turns: b.p.deepTurns, window: min(deepWindow, b.p.deepTurns/2)}
	w := b.turns("deep")
	n := b.p.deepTrajectories
	for i := range b.targets {
		d.early[i] = b.round(ctx, i, n, d.window, deepTimeout, w)
	}
	d.drive = b.round(ctx, gkIdx, n, d.turns-2*d.window, deepTimeout, w)
	b.mock.Reset()
	for i := range b.targets {
		d.late[i] = b.round(ctx, i, n, d.window, deepTimeout, w)
	}
	b.mock.Reset()
	if d.drive.ok+d.early[gkIdx].ok+d.late[gkIdx].ok != n*d.turns && ctx.Err() == nil {
		d.drive.fail(fmt.Errorf("gatekeeper: %d turns of %d trajectories made, want %d each", d.drive.ok+d.early[gkIdx].ok+d.late[gkIdx].ok, n, d.turns))
	}
	return d, ctx.Err()
}

// fillTimeout bounds the creation of -records records.
const fillTimeout = 15 * time.Minute

// recordStats is the records scenario.
type recordStats struct {
	records       int
	before, after [2]stats
	fill          stats // gatekeeper creating the records: one turn each
	// RSS of gatekeeper, and Redis's used_memory, before and after the
	// records were made.
	rss0, rss1     int64
	redis0, redis1 int64
}

// recordsPhase times small turns, creates -records trajectories the way
// agents do (one small turn each, each on its own trajectory), measures
// gatekeeper's resident memory and Redis's before and after, and times
// small turns again with every record stored and idle.
func (b *bench) recordsPhase(ctx context.Context) (recordStats, error) {
	r := recordStats{records: b.p.records}
	probe := b.turns("records-probe")
	var err error
	if r.before, err = b.rounds(ctx, b.p.conns, b.p.flatRounds, probe); err != nil {
		return r, err
	}
	gk := b.targets[gkIdx]
	if r.rss0, err = procRSS(gk.proc.pid()); err != nil {
		return r, err
	}
	if b.redis != nil {
		c, err := b.redisCounters(ctx)
		if err != nil {
			return r, err
		}
		r.redis0 = c.memory
	}
	fctx, cancel := context.WithTimeout(ctx, fillTimeout)
	r.fill = b.fill(fctx)
	cancel()
	if err := ctx.Err(); err != nil {
		return r, err
	}
	b.mock.Reset()
	if r.rss1, err = procRSS(gk.proc.pid()); err != nil {
		return r, err
	}
	if b.redis != nil {
		c, err := b.redisCounters(ctx)
		if err != nil {
			return r, err
		}
		r.redis1 = c.memory
	}
	r.after, err = b.rounds(ctx, b.p.conns, b.p.flatRounds, probe)
	return r, err
}

// fill makes -records records through gatekeeper, -conns workers taking
// the next record number until all are made.
func (b *bench) fill(ctx context.Context) stats {
	gk := b.targets[gkIdx]
	body := messagesBody(false, "one turn")
	results := make([]stats, min(b.p.conns, b.p.records))
	var next atomic.Int64
	m := b.mark(ctx, gkIdx)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range results {
		wg.Go(func() {
			s := &results[w]
			for i := next.Add(1) - 1; i < int64(b.p.records) && ctx.Err() == nil; i = next.Add(1) - 1 {
				forked, err := b.smallTurn(ctx, gk, body, fmt.Sprintf("record-%d", i))
				if err == nil && forked {
					// One turn per trajectory cannot find its thread busy.
					err = fmt.Errorf("record %d: turn forked a sibling thread", i)
				}
				if err != nil {
					s.fail(err)
					continue
				}
				s.ok++
			}
		})
	}
	wg.Wait()
	var total stats
	for _, r := range results {
		total.add(r)
	}
	total.elapsed = time.Since(start)
	total.cost = b.since(ctx, m)
	if total.ok+total.errs < b.p.records {
		total.fail(fmt.Errorf("gatekeeper: %d of %d records made before %s: %w", total.ok, b.p.records, fillTimeout, ctx.Err()))
	}
	return total
}

// subscriberStats is the subscribers scenario.
type subscriberStats struct {
	subscribers   int
	before, after [2]stats
	events        []int // events each subscriber read
	errs          []error
}

// subscribersPhase times small turns, opens -subscribers live event
// streams on gatekeeper's /admin/v1/stream that read everything, and times
// small turns again while they read.
func (b *bench) subscribersPhase(ctx context.Context) (subscriberStats, error) {
	s := subscriberStats{subscribers: b.p.subscribers}
	probe := b.turns("subscribers-probe")
	var err error
	if s.before, err = b.rounds(ctx, b.p.conns, b.p.flatRounds, probe); err != nil {
		return s, err
	}
	sctx, cancel := context.WithCancel(ctx)
	s.events = make([]int, s.subscribers)
	s.errs = make([]error, s.subscribers)
	opened := make(chan error, s.subscribers)
	var wg sync.WaitGroup
	for i := range s.subscribers {
		wg.Go(func() { s.events[i], s.errs[i] = b.subscribe(sctx, opened) })
	}
	var openErr error
	for range s.subscribers {
		openErr = errors.Join(openErr, <-opened)
	}
	if openErr == nil {
		s.after, err = b.rounds(ctx, b.p.conns, b.p.flatRounds, probe)
	}
	cancel()
	wg.Wait()
	return s, errors.Join(openErr, err)
}

// subscribe reads gatekeeper's live event stream until ctx ends, counting
// its events. It sends one value on opened: nil once the stream's header
// is in, or why it did not open.
func (b *bench) subscribe(ctx context.Context, opened chan<- error) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.targets[gkIdx].url+"/admin/v1/stream", nil)
	if err != nil {
		opened <- err
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := b.client.Do(req)
	if err != nil {
		opened <- err
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 200)) // the status alone says it failed
		err := fmt.Errorf("/admin/v1/stream: status %d: %s", resp.StatusCode, msg)
		opened <- err
		return 0, err
	}
	opened <- nil
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	n := 0
	for {
		// Bounded by ctx: the phase cancels it when its rounds end.
		if _, err := readEvent(br); err != nil {
			if ctx.Err() != nil {
				return n, nil
			}
			return n, fmt.Errorf("/admin/v1/stream after %d events: %w", n, err)
		}
		n++
	}
}
