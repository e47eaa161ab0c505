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
	"time"

	"gatekeeper/internal/clock"
)

// extraEvents is how many events an Anthropic text stream carries besides
// its deltas (message_start, content_block_start, ping, content_block_stop,
// message_delta, message_stop), with room to spare: a stream that goes past
// it is broken.
const extraEvents = 32

// streamTurn is the mock's streamed reply: -events text deltas with
// -event-delay between events.
func (b *bench) streamTurn() string {
	// Four characters a delta, so the text splits into exactly -events.
	text := strings.Repeat("tok ", b.p.events)
	return fmt.Sprintf(`{"kind":"text","text":%s,"deltas":%d,"event_delay":%s}`,
		strconv.Quote(text), b.p.events, strconv.Quote(b.p.eventDelay.String()))
}

// streams is the stream work: each worker on its own trajectory,
// prefix-<worker>, reads whole streams one after another.
func (b *bench) streams(prefix string) work {
	turn := b.streamTurn()
	return func(ctx context.Context, tg target, worker, _ int, s *stats) {
		traj := fmt.Sprintf("%s-%d", prefix, worker)
		o := b.openStream(ctx, tg, traj, turn)
		switch {
		case o.err != nil:
			s.fail(o.err)
		case !o.stop:
			s.fail(fmt.Errorf("%s: stream %s ended without message_stop after %d events", tg.name, traj, o.events))
		default:
			s.ok++
			s.events += o.events
			s.ttfb = append(s.ttfb, o.first)
			s.lat = append(s.lat, o.whole)
		}
	}
}

// streamOutcome is what the client saw of one stream.
type streamOutcome struct {
	events int
	first  time.Duration // request sent to first complete event
	whole  time.Duration // request sent to the end of the stream
	stop   bool          // message_stop was read
	err    error         // the request failed or the stream broke
}

// streamTimeout bounds one stream: its scripted length, and then some.
func (b *bench) streamTimeout() time.Duration {
	return time.Duration(b.p.events+extraEvents+1)*b.p.eventDelay + time.Minute
}

// openStream sends one streamed turn on trajectory traj and reads it to
// the end, timing its first event and its end.
func (b *bench) openStream(ctx context.Context, tg target, traj, turn string) streamOutcome {
	var o streamOutcome
	ctx, cancel := context.WithTimeout(ctx, b.streamTimeout())
	defer cancel()
	req, err := b.turnRequest(ctx, tg, messagesBody(true, "stream "+traj), traj, turn)
	if err != nil {
		o.err = err
		return o
	}
	start := time.Now()
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
	for o.events < b.p.events+extraEvents {
		name, err := readEvent(br)
		if errors.Is(err, io.EOF) {
			o.whole = time.Since(start)
			return o
		}
		if err != nil {
			o.err = fmt.Errorf("%s: reading event %d: %w", tg.name, o.events, err)
			return o
		}
		o.events++
		if o.events == 1 {
			o.first = time.Since(start)
		}
		if name == "message_stop" {
			o.stop = true
		}
	}
	o.err = fmt.Errorf("%s: more than %d events in a stream of %d deltas", tg.name, o.events, b.p.events)
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

// clockSleep waits d or until ctx ends.
func clockSleep(ctx context.Context, d time.Duration) error { return clock.Sleep(ctx, d) }
