package proxy

import (
	"errors"
	"hash/crc32"
	"slices"

	"gatekeeper/approvals"
	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// replyForm is the form a reply travels in.
type replyForm uint8

const (
	formJSON   replyForm = iota // one JSON body
	formStream                  // a stream of server-sent events
)

// formOf is the form of a reply that was streamed or not.
func formOf(streamed bool) replyForm {
	if streamed {
		return formStream
	}
	return formJSON
}

// reply is a whole provider reply in its form: what the escrow holds, and
// what it sends once decided.
type reply struct {
	form replyForm
	body []byte
}

// heldReply is the reply hold h keeps.
func heldReply(h *approvals.Hold) reply {
	return reply{form: formOf(h.Streamed), body: h.Reply}
}

// streamed reports whether r is a stream.
func (r reply) streamed() bool { return r.form == formStream }

// decode reads r as api's decoder does.
func (r reply) decode(api streaming.API) (*streaming.Result, error) {
	if !r.streamed() {
		return streamOf(api).DecodeJSON(r.body)
	}
	dec := streamOf(api).NewDecoder()
	if err := sse.Each(r.body, func(ev *sse.Event) error { dec.Decode(ev); return nil }); err != nil {
		return nil, err
	}
	return dec.Finish(), nil
}

// splice is r with cont, a continuation reply in r's form, spliced in as
// one message.
func (r reply) splice(api streaming.API, cont []byte) (reply, error) {
	var out []byte
	var err error
	if r.streamed() {
		out, err = streamOf(api).SpliceStream(r.body, cont)
	} else {
		out, err = streamOf(api).SpliceJSON(r.body, cont)
	}
	return reply{form: r.form, body: out}, err
}

// as is r's body in form.
func (r reply) as(api streaming.API, form replyForm) ([]byte, error) {
	switch {
	case r.form == form:
		return r.body, nil
	case form == formJSON:
		return streamOf(api).AssembleJSON(r.body)
	default:
		return streamOf(api).RenderSSE(r.body)
	}
}

// errPrefixMismatch: the decided reply does not begin with what the
// original client already received, so the rest cannot be appended.
var errPrefixMismatch = errors.New("proxy: the decided reply does not continue what the client received")

// render returns what client c receives of the decided reply dr, in the
// form it asked for: a stream (for the original request, only what follows
// the bytes it already has) or one JSON body.
func render(api streaming.API, dr *decidedReply, c *escrowClient) ([]byte, error) {
	filter, err := dr.filter(api, c)
	if err != nil {
		return nil, err
	}
	body, err := dr.reply.as(api, c.form)
	if err != nil {
		return nil, err
	}
	if c.form == formJSON {
		if len(dr.refuse) == 0 {
			return body, nil
		}
		return filter.Body(body)
	}
	// The reply goes through the filter the client's stream went through,
	// buffering calls until the stop as it did, so that its output begins
	// with exactly the bytes the client has.
	filter.Hold()
	var out []byte
	each := func(ev *sse.Event) error {
		if c.strip {
			raw, drop := streaming.StripUsage(ev.Raw)
			if drop {
				return nil
			}
			e := *ev
			e.Raw = raw
			ev = &e
		}
		out = filter.AppendEvent(out, *ev)
		return nil
	}
	if err := sse.Each(body, each); err != nil {
		return nil, err
	}
	if c.sent > 0 {
		if len(out) < c.sent || crc32.ChecksumIEEE(out[:c.sent]) != c.sum {
			return nil, errPrefixMismatch
		}
		out = out[c.sent:]
	}
	return out, nil
}

// filter is the call filter the decided reply goes through for client c:
// c's own policy, with the refused calls replaced by their texts.
func (dr *decidedReply) filter(api streaming.API, c *escrowClient) (*streaming.CallFilter, error) {
	allow := c.allow
	if allow == nil {
		allow = allowAll
	}
	refusal := func(tc streaming.ToolCall) string {
		if t, ok := dr.texts[tc.ID]; ok && slices.Contains(dr.refuse, tc.ID) {
			return t
		}
		if c.refusal != nil {
			return c.refusal(tc)
		}
		return "[gatekeeper] The call to " + tc.Name + " was not delivered."
	}
	f, err := streamOf(api).NewCallFilter(allow, refusal)
	if err != nil {
		return nil, err
	}
	if len(dr.refuse) > 0 {
		f.RefuseCalls(dr.refuse...)
	}
	return f, nil
}

// errorEvent is a provider error event that ends a stream whose client
// has nothing of the reply yet (a re-attached retry).
func errorEvent(api streaming.API, typ, msg string) []byte {
	f, err := streamOf(api).NewCallFilter(allowAll, func(streaming.ToolCall) string { return "" })
	if err != nil {
		return nil
	}
	return f.End(nil, typ, msg)
}
