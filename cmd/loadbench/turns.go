package main

import (
	"bytes"
	"cmp"
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

// maxTurnsPerWorker bounds a worker's loop whatever the clock does.
const maxTurnsPerWorker = 1_000_000

// warmupTurns is what each worker sends each target before the rounds.
const warmupTurns = 20

// turnTimeout bounds one small turn.
const turnTimeout = 30 * time.Second

// turnStats is one target's share of the small-turn phase.
type turnStats struct {
	ok   int
	errs int
	// forks counts gatekeeper replies naming a sibling thread of the
	// worker's trajectory (<id>~N): gatekeeper still had the previous turn
	// in flight when the next one arrived. Not an error for the agent.
	forks   int
	elapsed time.Duration // wall time of its rounds
	cost    cost          // what the process spent in its rounds
	rtt     int64         // Redis round trips in its rounds (gatekeeper on Redis)
	// redisCPU is what redis-server spent in its rounds (gatekeeper on
	// Redis); redisCPUErr says why it could not be read.
	redisCPU    time.Duration
	redisCPUErr error
	lat         []time.Duration // of successful turns
	// firstErr is the first failure seen, to say what went wrong.
	firstErr string
}

func (s *turnStats) fail(err error) {
	if s.errs == 0 {
		s.firstErr = err.Error()
	}
	s.errs++
}

func (s *turnStats) add(o turnStats) {
	s.ok += o.ok
	s.forks += o.forks
	s.elapsed += o.elapsed
	s.cost.add(o.cost)
	s.rtt += o.rtt
	s.redisCPU += o.redisCPU
	if s.redisCPUErr == nil {
		s.redisCPUErr = o.redisCPUErr
	}
	s.lat = append(s.lat, o.lat...)
	if o.errs > 0 && s.errs == 0 {
		s.firstErr = o.firstErr
	}
	s.errs += o.errs
}

func (s *turnStats) rate() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(s.ok) / s.elapsed.Seconds()
}

// turnPhase drives -conns closed-loop workers against each target for
// -duration in all, in -rounds rounds alternating bare and gatekeeper, so
// that a noisy neighbour on the machine hits both alike.
func (b *bench) turnPhase(ctx context.Context) ([2]turnStats, error) {
	var out [2]turnStats
	// Warm-up: connections, pools and the heap grow before any timing;
	// its errors still count.
	for i, tg := range b.targets {
		w := b.turnRound(ctx, tg, warmupTurns, time.Minute)
		out[i].errs, out[i].firstErr = w.errs, w.firstErr
	}
	b.mock.Reset()
	per := b.p.duration / time.Duration(b.p.rounds)
	for range b.p.rounds {
		for i, tg := range b.targets {
			out[i].add(b.turnRound(ctx, tg, maxTurnsPerWorker, per))
			// The mock keeps every request; only the stream phases read them.
			b.mock.Reset()
			if err := ctx.Err(); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// roundTrips is how many round trips gatekeeper's Redis client has made
// so far; 0 on the memory store.
func (b *bench) roundTrips() int64 {
	if b.rtt == nil {
		return 0
	}
	return b.rtt.Load()
}

// turnRound runs every worker until it made limit turns or d is over.
func (b *bench) turnRound(ctx context.Context, tg target, limit int, d time.Duration) turnStats {
	results := make([]turnStats, b.p.conns)
	// INFO is a round trip of gatekeeper's client: read before the count
	// starts and after it ends.
	var cpu0 time.Duration
	var cpuErr error
	if tg.gatekeeper && b.redis != nil {
		cpu0, cpuErr = b.redisCPU(ctx)
	}
	rtt0 := b.roundTrips()
	mark := markCost()
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for w := range b.p.conns {
		wg.Go(func() {
			res := &results[w]
			traj := fmt.Sprintf("bench-%d", w)
			body := messagesBody(false, fmt.Sprintf("ping from worker %d", w))
			for n := 0; n < limit && ctx.Err() == nil && time.Now().Before(deadline); n++ {
				t0 := time.Now()
				forked, err := b.smallTurn(ctx, tg, body, traj)
				if err != nil {
					res.fail(err)
					continue
				}
				res.ok++
				if forked {
					res.forks++
				}
				res.lat = append(res.lat, time.Since(t0))
			}
		})
	}
	wg.Wait()
	total := turnStats{}
	for _, r := range results {
		total.add(r)
	}
	total.elapsed = time.Since(start)
	total.cost = mark.since()
	if tg.gatekeeper {
		total.rtt = b.roundTrips() - rtt0
	}
	if tg.gatekeeper && b.redis != nil {
		cpu1, err := b.redisCPU(ctx)
		total.redisCPU, total.redisCPUErr = cpu1-cpu0, cmp.Or(cpuErr, err)
	}
	return total
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
	case strings.HasPrefix(rec, traj+"~"):
		return true, nil
	default:
		return false, fmt.Errorf("%s: reply names trajectory %q, want %q", tg.name, rec, traj)
	}
}
