package escrow

import (
	"errors"
	"hash/crc32"
	"slices"

	"gatekeeper/approvals"
	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// Form is the form a reply travels in.
type Form uint8

const (
	FormJSON   Form = iota // one JSON body
	FormStream             // a stream of server-sent events
)

// FormOf is the form of a reply that was streamed or not.
func FormOf(streamed bool) Form {
	if streamed {
		return FormStream
	}
	return FormJSON
}

// Reply is a whole provider reply in its form: what the escrow holds, and
// what it sends once decided.
type Reply struct {
	Form Form
	Body []byte
}

// Held is the reply hold h keeps.
func Held(h *approvals.Hold) Reply {
	return Reply{Form: FormOf(h.Streamed), Body: h.Reply}
}

// Streamed reports whether r is a stream.
func (r Reply) Streamed() bool { return r.Form == FormStream }

// Decode reads r as d's decoder does.
func (r Reply) Decode(d streaming.Dialect) (*streaming.Result, error) {
	if !r.Streamed() {
		return d.DecodeJSON(r.Body)
	}
	dec := d.NewDecoder()
	if err := sse.Each(r.Body, func(ev *sse.Event) error { dec.Decode(ev); return nil }); err != nil {
		return nil, err
	}
	return dec.Finish(), nil
}

// Splice is r with cont, a continuation reply in r's form, spliced in as
// one message.
func (r Reply) Splice(d streaming.Dialect, cont []byte) (Reply, error) {
	var out []byte
	var err error
	if r.Streamed() {
		out, err = d.SpliceStream(r.Body, cont)
	} else {
		out, err = d.SpliceJSON(r.Body, cont)
	}
	return Reply{Form: r.Form, Body: out}, err
}

// As is r's body in form.
func (r Reply) As(d streaming.Dialect, form Form) ([]byte, error) {
	switch {
	case r.Form == form:
		return r.Body, nil
	case form == FormJSON:
		return d.AssembleJSON(r.Body)
	default:
		return d.RenderSSE(r.Body)
	}
}

// errPrefixMismatch: the decided reply does not begin with what the
// original client already received, so the rest cannot be appended.
var errPrefixMismatch = errors.New("proxy: the decided reply does not continue what the client received")

// Render returns what client c receives of the decided reply dr, in the
// form it asked for, in dialect d: a stream (for the original request,
// only what follows the bytes it already has) or one JSON body.
func Render(d streaming.Dialect, dr *Decision, c *Client) ([]byte, error) {
	filter, err := dr.filter(d, c)
	if err != nil {
		return nil, err
	}
	body, err := dr.Reply.As(d, c.Form)
	if err != nil {
		return nil, err
	}
	if c.Form == FormJSON {
		if len(dr.Refuse) == 0 {
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
		if c.Strip {
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
	if c.Sent > 0 {
		if len(out) < c.Sent || crc32.ChecksumIEEE(out[:c.Sent]) != c.Sum {
			return nil, errPrefixMismatch
		}
		out = out[c.Sent:]
	}
	return out, nil
}

func allowAll(string) bool { return true }

// filter is the call filter the decided reply goes through for client c:
// c's own policy, with the refused calls replaced by their texts.
func (dr *Decision) filter(d streaming.Dialect, c *Client) (*streaming.CallFilter, error) {
	allow := c.Allow
	if allow == nil {
		allow = allowAll
	}
	refusal := func(tc streaming.ToolCall) string {
		if t, ok := dr.Texts[tc.ID]; ok && slices.Contains(dr.Refuse, tc.ID) {
			return t
		}
		if c.Refusal != nil {
			return c.Refusal(tc)
		}
		return "[gatekeeper] The call to " + tc.Name + " was not delivered."
	}
	f, err := d.NewCallFilter(allow, refusal)
	if err != nil {
		return nil, err
	}
	if len(dr.Refuse) > 0 {
		f.RefuseCalls(dr.Refuse...)
	}
	return f, nil
}

// ErrorEvent is d's error event that ends a stream whose client has
// nothing of the reply yet (a re-attached retry).
func ErrorEvent(d streaming.Dialect, typ, msg string) []byte {
	f, err := d.NewCallFilter(allowAll, func(streaming.ToolCall) string { return "" })
	if err != nil {
		return nil
	}
	return f.End(nil, typ, msg)
}
