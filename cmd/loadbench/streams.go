package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"gatekeeper/internal/clock"
)

// extraEvents is how many events an Anthropic text stream carries besides
// its deltas (message_start, content_block_start, ping, content_block_stop,
// message_delta, message_stop), with room to spare: a stream that goes past
// it is broken.
const extraEvents = 32

// startEvents is how many events of a stream count as its start.
const startEvents = 2

// streamTurn is the mock's streamed reply: -events text deltas with delay
// between events.
func (b *bench) streamTurn(delay time.Duration) string {
	// Four characters a delta, so the text splits into exactly -events.
	text := strings.Repeat("tok ", b.p.events)
	return fmt.Sprintf(`{"kind":"text","text":%s,"deltas":%d,"event_delay":%s}`,
		strconv.Quote(text), b.p.events, strconv.Quote(delay.String()))
}

// streamOutcome is what the client saw of one stream.
type streamOutcome struct {
	id    string
	start time.Time
	reads []time.Time // when each complete event was read
	stop  bool        // message_stop was read
	err   error       // the request failed or the stream broke
}

// openStream sends one streamed turn and reads it to the end, noting when
// each event is complete. first, when set, is called once the first event
// is in.
func (b *bench) openStream(ctx context.Context, tg target, id, turn string, first func()) streamOutcome {
	o := streamOutcome{id: id, reads: make([]time.Time, 0, b.p.events+extraEvents)}
	req, err := b.turnRequest(ctx, tg, messagesBody(true, "stream "+id), id, turn)
	if err != nil {
		o.err = err
		return o
	}
	req.Header.Set(headerBenchID, id)
	o.start = time.Now()
	resp, err := b.client.Do(req)
	if err != nil {
		o.err = err
		return o
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 200)) // the status alone says it failed
		o.err = fmt.Errorf("%s: status %d: %s", tg.name, resp.StatusCode, msg)
		return o
	}
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	for len(o.reads) < b.p.events+extraEvents {
		name, err := readEvent(br)
		if errors.Is(err, io.EOF) {
			return o
		}
		if err != nil {
			o.err = fmt.Errorf("%s: reading event %d: %w", tg.name, len(o.reads), err)
			return o
		}
		o.reads = append(o.reads, time.Now())
		if len(o.reads) == 1 && first != nil {
			first()
		}
		if name == "message_stop" {
			o.stop = true
		}
	}
	o.err = fmt.Errorf("%s: more than %d events in a stream of %d deltas", tg.name, len(o.reads), b.p.events)
	return o
}

// errCutEvent is an event whose blank line never came.
var errCutEvent = errors.New("stream ended inside an event")

// readEvent reads up to the blank line that completes the next event and
// returns its event name. io.EOF means the stream ended between events.
func readEvent(br *bufio.Reader) (string, error) {
	name := ""
	inEvent := false
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A data line longer than the buffer (event names are short):
			// skip the rest of it.
			inEvent = true
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err == nil {
				continue
			}
			line = nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) && !inEvent && len(line) == 0 {
				return "", io.EOF
			}
			if errors.Is(err, io.EOF) {
				return name, errCutEvent
			}
			return name, err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0 && inEvent:
			return name, nil
		case len(line) == 0:
			// Blank lines between events dispatch nothing.
		case bytes.HasPrefix(line, []byte("event:")):
			name = string(bytes.TrimSpace(line[len("event:"):]))
			inEvent = true
		default:
			inEvent = true
		}
	}
}

// streamStats is one target's stream phase.
type streamStats struct {
	streams   int
	errs      int // failed requests, broken streams, event counts the mock disagrees with
	truncated int // streams without message_stop
	ttfb      []time.Duration
	delays    []time.Duration // mock flush → client read, every event of every stream
	// later is delays without each stream's first startEvents events, whose
	// delay includes the stream's start (admission, headers) while other
	// streams are starting too.
	later    []time.Duration
	cost     cost  // what the process spent in the timed rounds
	rtt      int64 // Redis round trips in them (gatekeeper on Redis)
	firstErr string
}

func (s *streamStats) fail(err error) {
	if s.errs == 0 {
		s.firstErr = err.Error()
	}
	s.errs++
}

func (s *streamStats) add(o streamStats) {
	s.streams += o.streams
	s.truncated += o.truncated
	s.ttfb = append(s.ttfb, o.ttfb...)
	s.delays = append(s.delays, o.delays...)
	s.later = append(s.later, o.later...)
	s.cost.add(o.cost)
	s.rtt += o.rtt
	if o.errs > 0 && s.errs == 0 {
		s.firstErr = o.firstErr
	}
	s.errs += o.errs
}

// streamTimeout bounds one round of streams: the stagger, the scripted
// length, and then some.
func (b *bench) streamTimeout() time.Duration {
	return time.Duration(b.p.events+extraEvents+1)*b.p.eventDelay + time.Minute
}

// streamPhase runs a warm-up round of streams through each target, then
// -rounds timed rounds alternating the targets, as the small turns do.
func (b *bench) streamPhase(ctx context.Context) ([2]streamStats, error) {
	var out [2]streamStats
	for i, tg := range b.targets {
		w, err := b.streamRound(ctx, tg, "warm")
		if err != nil {
			return out, err
		}
		out[i].errs, out[i].truncated, out[i].firstErr = w.errs, w.truncated, w.firstErr
	}
	for r := range b.p.rounds {
		for i, tg := range b.targets {
			s, err := b.streamRound(ctx, tg, fmt.Sprint(r))
			if err != nil {
				return out, err
			}
			out[i].add(s)
		}
	}
	return out, nil
}

// streamRound opens -streams streams through tg and matches every event
// the client read with the time the mock flushed it. The starts are spread
// evenly over one event delay: streams of independent agents are not in
// step, and starting them in the same instant would make the mock write
// every stream's event at once, which measures a queue, not a proxy.
func (b *bench) streamRound(ctx context.Context, tg target, round string) (streamStats, error) {
	b.mock.Reset()
	ctx, cancel := context.WithTimeout(ctx, b.streamTimeout())
	defer cancel()
	turn := b.streamTurn(b.p.eventDelay)
	outs := make([]streamOutcome, b.p.streams)
	rtt0 := b.roundTrips()
	mark := markCost()
	begin := time.Now()
	var wg sync.WaitGroup
	for i := range outs {
		id := fmt.Sprintf("stream-%s-%s-%d", tg.name, round, i)
		at := begin.Add(b.p.eventDelay * time.Duration(i) / time.Duration(len(outs)))
		wg.Go(func() {
			if err := sleepUntil(ctx, at); err != nil {
				outs[i] = streamOutcome{id: id, err: err}
				return
			}
			outs[i] = b.openStream(ctx, tg, id, turn, nil)
		})
	}
	wg.Wait()
	spent := mark.since()
	if err := ctx.Err(); err != nil {
		return streamStats{}, fmt.Errorf("streams through %s: %w", tg.name, err)
	}
	s, err := b.matchStreams(ctx, tg, outs)
	s.cost = spent
	if tg.gatekeeper {
		s.rtt = b.roundTrips() - rtt0
	}
	return s, err
}

func sleepUntil(ctx context.Context, at time.Time) error {
	return clock.Sleep(ctx, time.Until(at))
}

// matchStreams pairs each client read with the mock's flush of the same
// event.
func (b *bench) matchStreams(ctx context.Context, tg target, outs []streamOutcome) (streamStats, error) {
	// The mock notes a flush after it happens: wait for its handlers.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := b.mock.WaitIdle(wctx); err != nil {
		return streamStats{}, fmt.Errorf("waiting for the mock after streams through %s: %w", tg.name, err)
	}
	sent := make(map[string][]time.Time, len(outs))
	for _, r := range b.mock.Requests() {
		if id := r.Header.Get(headerBenchID); id != "" {
			sent[id] = r.EventTimes
		}
	}
	s := streamStats{streams: len(outs)}
	for _, o := range outs {
		if !o.stop {
			s.truncated++
		}
		if o.err != nil {
			s.fail(o.err)
			continue
		}
		ts, ok := sent[o.id]
		switch {
		case !ok:
			s.fail(fmt.Errorf("%s: stream %s never reached the mock", tg.name, o.id))
			continue
		case len(ts) != len(o.reads):
			s.fail(fmt.Errorf("%s: stream %s: client read %d events, mock flushed %d", tg.name, o.id, len(o.reads), len(ts)))
			continue
		}
		if len(o.reads) > 0 {
			s.ttfb = append(s.ttfb, o.reads[0].Sub(o.start))
		}
		for i, read := range o.reads {
			s.delays = append(s.delays, read.Sub(ts[i]))
			if i >= startEvents {
				s.later = append(s.later, read.Sub(ts[i]))
			}
		}
	}
	return s, nil
}
