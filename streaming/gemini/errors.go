package gemini

import (
	"encoding/json"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// The error format of the Gemini API, the google.rpc.Status of every
// Google API: {"error":{"code":<HTTP status>,"message":...,"status":<the
// canonical code's name>}}. gatekeeper's error types map to the status
// an agent's client branches on.

// statusOf is the HTTP status and canonical code of an error type.
func statusOf(typ string) (int, string) {
	switch typ {
	case "authentication_error":
		return 401, "UNAUTHENTICATED"
	case "permission_error", "approval_refused":
		return 403, "PERMISSION_DENIED"
	case "invalid_request_error":
		return 400, "INVALID_ARGUMENT"
	case "not_found_error":
		return 404, "NOT_FOUND"
	case "budget_exceeded":
		// 402 is not a status Google sends; FAILED_PRECONDITION says a
		// condition of the call is not met, which no retry changes
		// (RESOURCE_EXHAUSTED is Google's quota, which clients wait out).
		return 402, "FAILED_PRECONDITION"
	case "rate_limited":
		return 429, "RESOURCE_EXHAUSTED"
	case "trajectory_canceled":
		return 409, "ABORTED"
	case "trajectory_paused":
		return 503, "UNAVAILABLE"
	case "upstream_error":
		return 502, "UNAVAILABLE"
	}
	return 500, "INTERNAL"
}

// ErrorBody is the Gemini error body of type typ saying msg.
func (Dialect) ErrorBody(typ, msg string) []byte {
	code, status := statusOf(typ)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "message": msg, "status": status}}) // maps of strings and ints always marshal
	return b
}

// NewKeepalive returns the keepalive of a held stream: a chunk whose
// one candidate has a model content without parts, which Gemini CLI and
// the SDKs take without changing the reply they build (no text, no call,
// no finishReason, no usage). An SSE comment will not do: the Gemini
// SDKs' stream parser reads only "data: " lines, and a comment stalls it
// for good.
func (Dialect) NewKeepalive() streaming.Keepalive { return &keepalive{} }

type keepalive struct {
	head []byte // the responseId and modelVersion members of the reply
}

var _ streaming.Keepalive = (*keepalive)(nil)

func (k *keepalive) Forwarded(ev *sse.Event, _ *streaming.Result) {
	if k.head != nil || !ev.HasData || !streaming.ValidJSON(ev) {
		return
	}
	r := gjson.ParseBytes(ev.Data)
	id, model := r.Get("responseId"), r.Get("modelVersion")
	if id.Type != gjson.String || model.Type != gjson.String {
		return
	}
	k.head = append(append(append(append([]byte{}, `,"modelVersion":`...), model.Raw...), `,"responseId":`...), id.Raw...)
}

// keepaliveData is the chunk a keepalive carries, before the reply's
// own members.
const keepaliveData = `{"candidates":[{"content":{"role":"model","parts":[]},"index":0}]`

func (k *keepalive) Event() []byte {
	data := append(append([]byte(keepaliveData), k.head...), '}')
	return sse.AppendFrame(nil, "", data)
}

// Keepalive is the chunk of a keepalive that names no reply.
var Keepalive = sse.AppendFrame(nil, "", []byte(keepaliveData+"}"))

// endChunk is the error chunk that ends a reply now.
func endChunk(dst []byte, typ, msg string) []byte {
	return sse.AppendFrame(dst, "", Dialect{}.ErrorBody(typ, msg))
}
