package replybody

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"gatekeeper/proxy/internal/escrow"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/proxy/relay"
	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// Streamed is what a streamed reply is read with, besides its Reply.
type Streamed struct {
	Filter     *streaming.CallFilter // what the agent gets of each event; held calls wait in it
	StripUsage bool                  // usage was asked for on the agent's behalf: it is taken out
	// Keepalive is the period of keepalives while events wait behind a
	// held call, and the longest the agent is left without one.
	Keepalive     time.Duration
	MaxEventBytes int
	// Buf is what the provider's body is read into; Release takes it back
	// once the body is closed (nil: it is dropped).
	Buf     []byte
	Release func([]byte)
	Output  *atomic.Int64 // the reply's output so far, in bytes, for the heartbeat; nil: none
	Gates   *Gates        // nil for a tenant without gates
}

// Stream is the reply body of a streamed turn, which decides what the
// agent gets of each event. Each Read hands the relay (relay.Copy) whole
// events only, as soon as they are complete, so every event is written and
// flushed at once and never half of one; meanwhile the decoder sees every
// event.
//
// The keepalive of a held stream (streaming.Keepalive, one per dialect)
// also covers a call held while it streams: what the provider sends after
// the call's first event waits behind it, so that the agent gets the
// provider's events in their order (streaming.CallFilter's Hold), and a
// call whose input takes longer than approvals.keepalive to stream would
// otherwise leave the agent without an event for that long.
type Stream struct {
	r   Reply
	s   Streamed
	up  *relay.Upstream // the provider's body, read into s.Buf
	rd  *sse.Reader
	dec streaming.Decoder
	out []byte // complete events not yet handed over
	off int
	err error // sticky: io.EOF at a clean end

	recorded bool // the turn was recorded at the reply's end
	closed   bool

	held *escrow.Stream // the escrow's state; nil for a tenant without gates

	alive streaming.Keepalive // what a keepalive of this stream is
	// quiet is when the agent last got bytes, or the filter began to hold
	// what the provider sends.
	quiet time.Time
}

// NewStream is the streamed reply body of r's turn: body is the provider's.
func NewStream(r Reply, body io.ReadCloser, s Streamed) *Stream {
	b := &Stream{r: r, s: s, up: relay.NewUpstream(body, s.Buf), rd: sse.NewReader(s.MaxEventBytes),
		dec: r.Dialect.NewDecoder(), alive: r.Dialect.NewKeepalive()}
	if s.Gates != nil {
		b.held = s.Gates.Escrow.NewStream()
	}
	return b
}

func (b *Stream) Read(p []byte) (int, error) {
	for b.off >= len(b.out) {
		if b.err != nil && b.holding() {
			b.holdRead()
			continue
		}
		if b.err != nil {
			return 0, b.err
		}
		b.out, b.off = b.out[:0], 0
		in, err := b.up.Read(b.wait())
		if errors.Is(err, relay.ErrQuiet) {
			// The agent waited approvals.keepalive behind a held call: it
			// gets a keepalive while the read goes on aside.
			b.out = append(b.out, b.alive.Event()...)
			b.quiet = time.Now()
			continue
		}
		if len(in) > 0 {
			b.r.Span.FirstByte()
			if ferr := b.rd.Feed(in, b.take); ferr != nil {
				b.err = ferr
				continue
			}
			b.keepAlive()
		}
		switch {
		case err == io.EOF:
			b.end()
		case err != nil:
			b.fail(err)
		}
	}
	if res := b.dec.Result(); !b.recorded && (res.Done || b.err == io.EOF) && !b.holding() {
		b.recorded = true
		// Record the turn before the agent gets the reply's last bytes: an
		// agent answering at once must find its thread ready, not busy.
		b.r.Turn.Settle(res, http.StatusOK, nil)
	}
	n := copy(p, b.out[b.off:])
	b.off += n
	return n, nil
}

// take decodes one event as the provider sent it (the meter needs its
// usage) and queues what the agent receives of it.
func (b *Stream) take(ev *sse.Event) error {
	b.r.Dialect.ReadExtras(b.r.Extras, ev.Data)
	if b.held != nil {
		return b.takeHeld(ev)
	}
	b.dec.Decode(ev)
	if b.s.Output != nil {
		b.s.Output.Store(b.dec.Result().OutputBytes)
	}
	b.forward(ev)
	return nil
}

// keepAlive hands the agent gatekeeper's own keepalive once the provider's
// events have waited behind a held call for approvals.keepalive: they go
// out only in the provider's order, after the call, and the agent must not
// take the wait for a stalled stream.
func (b *Stream) keepAlive() {
	now := time.Now()
	if len(b.out) > 0 || !b.heldBack() || b.quiet.IsZero() {
		b.quiet = now
		return
	}
	if now.Sub(b.quiet) >= b.s.Keepalive {
		b.out = append(b.out, b.alive.Event()...)
		b.quiet = now
	}
}

// heldBack reports the filter holding what the provider sent behind a
// call whose end has not arrived (not the escrow's hold, whose wait keeps
// the agent alive itself).
func (b *Stream) heldBack() bool {
	return b.s.Filter != nil && b.s.Filter.Holding() && !b.holding()
}

// wait is how long the next read of the provider may take before the
// agent gets a keepalive; -1: as long as it takes. While the filter holds
// back what the provider sent, a provider that then falls silent must not
// leave the agent without a byte for longer than it would have been
// without gatekeeper: the read runs aside (relay.Upstream), and each
// approvals.keepalive the agent waits it gets a keepalive.
func (b *Stream) wait() time.Duration {
	if !b.heldBack() || b.quiet.IsZero() {
		return -1
	}
	return max(b.s.Keepalive-time.Since(b.quiet), 0)
}

// forward queues what the agent receives of one decoded event.
func (b *Stream) forward(ev *sse.Event) {
	f := b.s.Filter
	if b.s.StripUsage {
		raw, drop := streaming.StripUsage(ev.Raw)
		if drop {
			return
		}
		if f == nil {
			b.out = append(b.out, raw...)
			return
		}
		e := *ev
		e.Raw = raw
		ev = &e
	}
	if f != nil {
		b.out = f.AppendEvent(b.out, *ev)
		if !f.Holding() {
			// It went out (or was edited out): the keepalive may build on it.
			b.alive.Forwarded(ev, b.dec.Result())
		}
		return
	}
	b.out = append(b.out, ev.Raw...)
}

// end handles the upstream's EOF: bytes of a last event without its blank
// line are forwarded only when they complete the reply.
func (b *Stream) end() {
	mark := len(b.out)
	_ = b.rd.Finish(b.take) // take never fails
	if b.dec.Finish().Truncated {
		b.out = b.out[:mark]
		b.err = ErrTruncated
		return
	}
	b.err = io.EOF
}

// fail ends the reply after the upstream read failed. A call an operator
// canceled, or that ran out its deadline, ends with the provider's error
// event and no half tool call; a killed one drops the agent's connection;
// anything else aborts it too (the agent retries).
func (b *Stream) fail(err error) {
	switch st := b.r.Turn.Stopped(); st.Kind {
	case outcome.Canceled, outcome.Deadline, outcome.Shutdown:
		b.out = b.s.Filter.End(b.out, st.Type, st.Msg)
		b.err = io.EOF
	case outcome.Killed:
		b.err = ErrKilled
	default:
		b.err = err
	}
}

func (b *Stream) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.up.Close() // s.Buf is the provider read's until then
	var cause error
	if b.err != nil && b.err != io.EOF {
		cause = b.err
	} else if b.err == nil {
		cause = errors.New("reply body closed before its end")
	}
	res := b.dec.Result()
	if cause != nil && res.Done && b.off >= len(b.out) {
		// The terminal event reached the agent, which then hung up before
		// the provider closed the stream: the reply is complete.
		cause = nil
	}
	b.r.Turn.Settle(res, http.StatusOK, cause)
	if b.s.Release != nil {
		b.s.Release(b.s.Buf)
	}
	return err
}
