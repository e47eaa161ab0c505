package proxy

import (
	"errors"
	"io"
	"net/http"
	"time"

	"gatekeeper/config"
	"gatekeeper/proxy/internal/dialect"
	"gatekeeper/proxy/internal/escrow"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/proxy/relay"
	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// errTruncated aborts the agent's connection when the provider's stream
// ended without its terminal event: a clean end after half a tool call is
// taken as success by real agents, which then silently drop the call.
var errTruncated = errors.New("proxy: upstream stream ended without its terminal event")

// sseBody is the reply body of a streamed turn: the turn's reader, which
// decides what the agent gets of each event. Each Read hands the relay
// (relay.Copy) whole events only, as soon as they are complete, so every
// event is written and flushed at once and never half of one; meanwhile
// the decoder sees every event.
type sseBody struct {
	t   *turn
	up  *relay.Upstream // the provider's body, read into in
	rd  *sse.Reader
	dec streaming.Decoder
	in  []byte
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

func (b *sseBody) Read(p []byte) (int, error) {
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
			b.t.tt.FirstByte()
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
		b.t.settle(b.t.outcomeOf(res, http.StatusOK, nil))
	}
	n := copy(p, b.out[b.off:])
	b.off += n
	return n, nil
}

// take decodes one event as the provider sent it (the meter needs its
// usage) and queues what the agent receives of it.
func (b *sseBody) take(ev *sse.Event) error {
	dialect.Stream(b.t.req.api).ReadExtras(&b.t.extras, ev.Data)
	if b.held != nil {
		return b.takeHeld(ev)
	}
	b.dec.Decode(ev)
	b.t.streamed.Store(b.dec.Result().OutputBytes)
	b.forward(ev)
	return nil
}

// keepAlive hands the agent gatekeeper's own keepalive once the provider's
// events have waited behind a held call for approvals.keepalive: they go
// out only in the provider's order, after the call, and the agent must not
// take the wait for a stalled stream.
func (b *sseBody) keepAlive() {
	now := time.Now()
	if len(b.out) > 0 || !b.heldBack() || b.quiet.IsZero() {
		b.quiet = now
		return
	}
	if now.Sub(b.quiet) >= b.t.s.keepaliveEvery() {
		b.out = append(b.out, b.alive.Event()...)
		b.quiet = now
	}
}

// heldBack reports the filter holding what the provider sent behind a
// call whose end has not arrived (not the escrow's hold, whose wait keeps
// the agent alive itself).
func (b *sseBody) heldBack() bool {
	return b.t.filter != nil && b.t.filter.Holding() && !b.holding()
}

// wait is how long the next read of the provider may take before the
// agent gets a keepalive; -1: as long as it takes. While the filter holds
// back what the provider sent, a provider that then falls silent must not
// leave the agent without a byte for longer than it would have been
// without gatekeeper: the read runs aside (relay.Upstream), and each
// approvals.keepalive the agent waits it gets a keepalive.
func (b *sseBody) wait() time.Duration {
	if !b.heldBack() || b.quiet.IsZero() {
		return -1
	}
	return max(b.t.s.keepaliveEvery()-time.Since(b.quiet), 0)
}

// forward queues what the agent receives of one decoded event.
func (b *sseBody) forward(ev *sse.Event) {
	t := b.t
	if t.stripUsage {
		raw, drop := streaming.StripUsage(ev.Raw)
		if drop {
			return
		}
		if t.filter == nil {
			b.out = append(b.out, raw...)
			return
		}
		e := *ev
		e.Raw = raw
		ev = &e
	}
	if t.filter != nil {
		b.out = t.filter.AppendEvent(b.out, *ev)
		if !t.filter.Holding() {
			// It went out (or was edited out): the keepalive may build on it.
			b.alive.Forwarded(ev, b.dec.Result())
		}
		return
	}
	b.out = append(b.out, ev.Raw...)
}

// end handles the upstream's EOF: bytes of a last event without its blank
// line are forwarded only when they complete the reply.
func (b *sseBody) end() {
	mark := len(b.out)
	_ = b.rd.Finish(b.take) // take never fails
	if b.dec.Finish().Truncated {
		b.out = b.out[:mark]
		b.err = errTruncated
		return
	}
	b.err = io.EOF
}

// fail ends the reply after the upstream read failed. A call an operator
// canceled, or that ran out its deadline, ends with the provider's error
// event and no half tool call; a killed one drops the agent's connection;
// anything else aborts it too (the agent retries).
func (b *sseBody) fail(err error) {
	t := b.t
	switch t.stopReason() {
	case stopCancel, stopDeadline, stopShutdown:
		typ, msg := t.stopError()
		b.out = t.filter.End(b.out, typ, msg)
		b.err = io.EOF
	case stopKill:
		b.err = errKilled
	default:
		b.err = err
	}
}

func (b *sseBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.up.Close() // b.in is the provider read's until then
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
	b.t.settle(b.t.outcomeOf(res, http.StatusOK, cause))
	b.t.s.bufs.Put(b.in)
	return err
}

// jsonBody is the reply body of a non-streamed turn or of an upstream
// error: forwarded as it comes, kept (up to limit) to decode at the end.
type jsonBody struct {
	t      *turn
	src    io.ReadCloser
	status int
	limit  int64
	buf    []byte
	over   bool
	err    error

	recorded bool
}

func (b *jsonBody) Read(p []byte) (int, error) {
	n, err := b.src.Read(p)
	if n > 0 {
		b.t.tt.FirstByte()
	}
	if n > 0 && !b.over {
		if int64(len(b.buf)+n) > b.limit {
			b.over, b.buf = true, nil
		} else {
			b.buf = append(b.buf, p[:n]...)
		}
	}
	if err != nil {
		b.err = err
	}
	if err == io.EOF {
		b.record() // before the last bytes reach the agent (see sseBody.Read)
	}
	return n, err
}

func (b *jsonBody) Close() error {
	err := b.src.Close()
	b.record()
	return err
}

// record settles the turn from the body seen so far; only the first call
// counts.
func (b *jsonBody) record() {
	if b.recorded {
		return
	}
	b.recorded = true
	t := b.t
	var cause error
	if b.err != io.EOF {
		cause = b.err
		if cause == nil {
			cause = errors.New("reply body closed before its end")
		}
	}
	if b.status < 200 || b.status > 299 {
		o := outcome.Turn{Stop: "error", Status: b.status, Upstream: true, Detail: upstreamErrorDetail(t.req.api, b.buf)}
		t.settle(o)
		return
	}
	res := &streaming.Result{}
	dialect.Stream(t.req.api).ReadExtras(&t.extras, b.buf)
	if !b.over && cause == nil {
		if r, derr := dialect.Stream(t.req.api).DecodeJSON(b.buf); derr == nil {
			res = r
		} else {
			cause = derr
		}
	}
	t.settle(t.outcomeOf(res, b.status, cause))
}

// upstreamErrorDetail picks the provider's error type out of an error body
// for the event log; the body itself reaches the agent unchanged.
func upstreamErrorDetail(api streaming.API, body []byte) string {
	if res, err := dialect.Stream(api).DecodeJSON(body); err == nil && len(res.Errors) > 0 {
		return res.Errors[0].Type + ": " + res.Errors[0].Message
	}
	return ""
}

// The keepalive of a held stream (streaming.Keepalive, one per dialect)
// also covers a call held while it streams: what the provider sends after
// the call's first event waits behind it, so that the agent gets the
// provider's events in their order (streaming.CallFilter's Hold), and a
// call whose input takes longer than approvals.keepalive to stream would
// otherwise leave the agent without an event for that long.

// keepaliveEvery is the period of keepalives on a held stream, and the
// longest a held call's stream leaves the agent without one.
func (s *Server) keepaliveEvery() time.Duration {
	if d := s.cfg.Approvals.Keepalive.Std(); d > 0 {
		return d
	}
	return config.DefaultKeepalive
}
