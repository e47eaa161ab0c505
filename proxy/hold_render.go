package proxy

import (
	"errors"
	"hash/crc32"
	"slices"

	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// keepalive is what a held stream of api sends while it waits.

// errPrefixMismatch: the decided reply does not begin with what the
// original client already received, so the rest cannot be appended.
var errPrefixMismatch = errors.New("proxy: the decided reply does not continue what the client received")

// render returns what client c receives of the decided reply hr, in the
// form it asked for: a stream (for the original request, only what follows
// the bytes it already has) or one JSON body.
func render(api streaming.API, hr *heldReply, c *holdClient) ([]byte, error) {
	filter, err := hr.filter(api, c)
	if err != nil {
		return nil, err
	}
	if !c.stream {
		body := hr.body
		if hr.streamed {
			if body, err = streamOf(api).AssembleJSON(hr.body); err != nil {
				return nil, err
			}
		}
		if len(hr.refuse) == 0 {
			return body, nil
		}
		return filter.Body(body)
	}
	stream := hr.body
	if !hr.streamed {
		if stream, err = streamOf(api).RenderSSE(hr.body); err != nil {
			return nil, err
		}
	}
	// The reply goes through the filter the client's stream went through,
	// holding calls until the stop as it did, so that its output begins
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
	if err := sse.Each(stream, each); err != nil {
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
func (hr *heldReply) filter(api streaming.API, c *holdClient) (*streaming.CallFilter, error) {
	allow := c.allow
	if allow == nil {
		allow = allowAll
	}
	refusal := func(tc streaming.ToolCall) string {
		if t, ok := hr.texts[tc.ID]; ok && slices.Contains(hr.refuse, tc.ID) {
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
	if len(hr.refuse) > 0 {
		f.RefuseCalls(hr.refuse...)
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
