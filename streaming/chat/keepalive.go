package chat

import (
	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// comment is the keepalive of a held Chat stream: the SDKs skip SSE
// comments, and no chunk would leave the reply they build unchanged.
var comment = []byte(": keepalive\n\n")

type keepalive struct{}

func (Dialect) NewKeepalive() streaming.Keepalive { return keepalive{} }

func (keepalive) Forwarded(*sse.Event, *streaming.Result) {}

func (keepalive) Event() []byte { return comment }
