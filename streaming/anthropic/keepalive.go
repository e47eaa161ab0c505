package anthropic

import (
	"strconv"

	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// ping is the keepalive before the reply's message_start went out: the
// SDKs skip ping events.
var ping = []byte("event: ping\ndata: {\"type\": \"ping\"}\n\n")

// keepalive repeats, once message_start went out, a message_delta that
// reports no stop and the output tokens the client was already told of:
// the SDKs take it without changing the message they build.
type keepalive struct {
	output int64 // the output tokens the client was told of
	seen   bool  // message_start went out
}

func (Dialect) NewKeepalive() streaming.Keepalive { return &keepalive{} }

func (k *keepalive) Forwarded(ev *sse.Event, res *streaming.Result) {
	if string(ev.Name) == "message_start" {
		k.seen = true
	}
	k.output = res.Usage.OutputTokens
}

func (k *keepalive) Event() []byte {
	if !k.seen {
		return ping
	}
	b := []byte("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":null,\"stop_sequence\":null},\"usage\":{\"output_tokens\":")
	b = strconv.AppendInt(b, k.output, 10)
	return append(b, "}}\n\n"...)
}
