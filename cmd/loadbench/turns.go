package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// smallTurn is the mock's reply to every small turn: a few words, end_turn.
const smallTurn = `{"kind":"text","text":"pong"}`

// maxUnitsPerWorker bounds a worker's loop in a timed round whatever the
// clock does.
const maxUnitsPerWorker = 1_000_000

// warmupTurns is what each worker sends each target before a phase's
// rounds.
const warmupTurns = 20

// turnTimeout bounds one small turn.
const turnTimeout = 30 * time.Second

// stats is one target's share of a phase: what the client saw, and what
// the target's process spent.
type stats struct {
	ok   int // turns or streams completed
	errs int
	// forks counts gatekeeper replies naming a sibling thread of the
	// worker's trajectory (<id>/~N): gatekeeper still had the previous turn
	// in flight when the next one arrived. Not an error for the agent.
	forks   int
	events  int           // stream events read
	elapsed time.Duration // wall time of its rounds
	cost    cost
	lat     []time.Duration // turns: request to whole reply; streams: to message_stop
	ttfb    []time.Duration // streams: request to first event
	// firstErr is the first failure seen, to say what went wrong.
	firstErr string
}

func (s *stats) fail(err error) {
	if s.errs == 0 {
		s.firstErr = err.Error()
	}
	s.errs++
}

func (s *stats) add(o stats) {
	s.ok += o.ok
	s.forks += o.forks
	s.events += o.events
	s.elapsed += o.elapsed
	s.cost.add(o.cost)
	s.lat = append(s.lat, o.lat...)
	s.ttfb = append(s.ttfb, o.ttfb...)
	if o.errs > 0 && s.errs == 0 {
		s.firstErr = o.firstErr
	}
	s.errs += o.errs
}

// rate is units completed per second of the rounds' wall time.
func (s *stats) rate() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(s.ok) / s.elapsed.Seconds()
}

// work does a worker's n-th unit (a turn, a stream) through tg and notes
// it in s.
type work func(ctx context.Context, tg target, worker, n int, s *stats)

// round runs workers closed-loop through target i until each did limit
// units or d is over, with the target's counters read around it.
func (b *bench) round(ctx context.Context, i, workers, limit int, d time.Duration, w work) stats {
	tg := b.targets[i]
	results := make([]stats, workers)
	m := b.mark(ctx, i)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for worker := range workers {
		wg.Go(func() {
			// At least one unit each, however late the worker starts.
			for n := 0; n < limit && ctx.Err() == nil && (n == 0 || time.Now().Before(deadline)); n++ {
				w(ctx, tg, worker, n, &results[worker])
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
	return total
}

// rounds warms both targets up, then runs the timed rounds alternating
// gatekeeper and bare, so that a noisy neighbour on the machine hits both
// alike. Warm-up errors count; its figures do not.
func (b *bench) rounds(ctx context.Context, workers, rounds int, w work) ([2]stats, error) {
	var out [2]stats
	for i := range b.targets {
		warm := b.round(ctx, i, workers, warmupTurns, time.Minute, w)
		out[i].errs, out[i].firstErr = warm.errs, warm.firstErr
	}
	b.mock.Reset()
	for range rounds {
		for i := range b.targets {
			out[i].add(b.round(ctx, i, workers, maxUnitsPerWorker, b.p.duration, w))
			// The mock keeps requests; nothing here reads them.
			b.mock.Reset()
			if err := ctx.Err(); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// turns is the small-turn work: each worker on its own trajectory,
// prefix-<worker>.
func (b *bench) turns(prefix string) work {
	return func(ctx context.Context, tg target, worker, _ int, s *stats) {
		traj := fmt.Sprintf("%s-%d", prefix, worker)
		body := messagesBody(false, "ping from "+traj)
		t0 := time.Now()
		forked, err := b.smallTurn(ctx, tg, body, traj)
		if err != nil {
			s.fail(err)
			return
		}
		s.ok++
		if forked {
			s.forks++
		}
		s.lat = append(s.lat, time.Since(t0))
	}
}

// smallTurn sends one non-streamed turn and checks its reply: 200, a
// complete Messages body, and through gatekeeper the trajectory asked for
// or a sibling thread of it (forked).
func (b *bench) smallTurn(ctx context.Context, tg target, body []byte, traj string) (forked bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, turnTimeout)
	defer cancel()
	req, err := b.turnRequest(ctx, tg, body, traj, smallTurn)
	if err != nil {
		return false, err
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case err != nil:
		return false, fmt.Errorf("%s: reading the reply: %w", tg.name, err)
	case resp.StatusCode != http.StatusOK:
		return false, fmt.Errorf("%s: status %d: %.200s", tg.name, resp.StatusCode, got)
	case !bytes.Contains(got, []byte(`"stop_reason":"end_turn"`)):
		return false, fmt.Errorf("%s: reply is not a complete Messages body: %.200s", tg.name, got)
	case !tg.gatekeeper:
		return false, nil
	}
	switch rec := resp.Header.Get("X-Gatekeeper-Trajectory"); {
	case rec == traj:
		return false, nil
	case strings.HasPrefix(rec, traj+"/~"):
		return true, nil
	default:
		return false, fmt.Errorf("%s: reply names trajectory %q, want %q", tg.name, rec, traj)
	}
}
