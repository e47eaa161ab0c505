package responses

import (
	"bytes"
	"encoding/json"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/openai"
	"gatekeeper/streaming/sse"
)

// keepalive repeats the stream's response.in_progress event, or one made
// from its response.created, which the SDKs take without changing the
// response they build.
type keepalive struct {
	event []byte // the in_progress event to repeat
}

func (Dialect) NewKeepalive() streaming.Keepalive { return &keepalive{} }

func (k *keepalive) Forwarded(ev *sse.Event, _ *streaming.Result) {
	switch string(ev.Name) {
	case "response.in_progress":
		if !ev.Unterminated {
			k.event = bytes.Clone(ev.Raw)
		}
	case "response.created":
		if k.event == nil {
			k.event = inProgressEvent(ev.Data)
		}
	}
}

func (k *keepalive) Event() []byte {
	if k.event == nil {
		return openai.Comment // before the reply's opening event went out
	}
	return k.event
}

// inProgressEvent turns the data of a response.created event into a
// response.in_progress event carrying the same response object, or nil
// when the data is not a JSON object with a response object.
func inProgressEvent(data []byte) []byte {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil
	}
	if resp := bytes.TrimSpace(fields["response"]); len(resp) == 0 || resp[0] != '{' {
		return nil
	}
	fields["type"] = json.RawMessage(`"response.in_progress"`)
	out, err := json.Marshal(fields)
	if err != nil {
		return nil
	}
	b := append([]byte("event: response.in_progress\ndata: "), out...)
	return append(b, "\n\n"...)
}
