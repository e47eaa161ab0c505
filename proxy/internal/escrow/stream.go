package escrow

import (
	"hash/crc32"

	"gatekeeper/approvals"
)

// Phase is where a streamed turn of a tenant with gates stands.
type Phase uint8

const (
	Forward  Phase = iota // events go to the client as they come
	Escrowed              // a gated call was found at the stop: the rest is read and kept
	Waiting               // the hold is open: Await, keepalives until the decision
	Done                  // the decided reply (or an error event) was handed over
)

// Stream is the escrow's part of a streamed turn whose tenant has gates:
// the reply as received (bounded by approvals.max_held_bytes), and what
// the client has of it.
type Stream struct {
	raw   []byte
	limit int64
	over  bool // raw passed limit and was dropped
	sent  int  // bytes the client was handed
	sum   uint32
	phase Phase
	gated []Gated
	wait  *Wait
}

// NewStream is the escrow's state of a new streamed turn.
func (e *Keeper) NewStream() *Stream { return &Stream{limit: e.maxHeld} }

// Keep adds an event's bytes to the held reply, within the limit.
func (h *Stream) Keep(raw []byte) {
	if h.over {
		return
	}
	if int64(len(h.raw)+len(raw)) > h.limit {
		h.over, h.raw = true, nil
		return
	}
	h.raw = append(h.raw, raw...)
}

// Forwarded counts out as handed to the client.
func (h *Stream) Forwarded(out []byte) {
	h.sent += len(out)
	h.sum = crc32.Update(h.sum, crc32.IEEETable, out)
}

// Phase is where the stream stands.
func (h *Stream) Phase() Phase { return h.phase }

// Holding reports whether the escrow owns the rest of the reply.
func (h *Stream) Holding() bool { return h.phase == Escrowed || h.phase == Waiting }

// TooLarge reports whether the reply outgrew what can be held.
func (h *Stream) TooLarge() bool { return h.over }

// Escrow stops forwarding: the gated calls g were found at the reply's
// stop, and the rest of the reply is kept.
func (h *Stream) Escrow(g []Gated) { h.gated, h.phase = g, Escrowed }

// Gated is the gated calls of the escrowed reply; regated, when not
// empty, replaces them (the whole reply judged again).
func (h *Stream) Gated(regated []Gated) []Gated {
	if len(regated) > 0 {
		h.gated = regated
	}
	return h.gated
}

// Reply is the held reply as received.
func (h *Stream) Reply() Reply { return Reply{Form: FormStream, Body: h.raw} }

// Attach makes c, the original client, wait on hold: what c has of the
// reply is final, as nothing more was forwarded once the escrow began.
func (h *Stream) Attach(hold *approvals.Hold, c *Client) {
	c.Sent, c.Sum = h.sent, h.sum
	h.wait, h.phase, h.raw = &Wait{Hold: hold, Client: c}, Waiting, nil
}

// Wait is the original client's wait, once attached.
func (h *Stream) Wait() *Wait { return h.wait }

// End marks the stream handed over.
func (h *Stream) End() { h.phase = Done }
