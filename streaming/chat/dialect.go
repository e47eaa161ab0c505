package chat

import (
	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/callfilter"
	"gatekeeper/streaming/internal/openai"
	"gatekeeper/streaming/internal/reshape"
)

// Dialect is the OpenAI Chat Completions API (and compatible providers).
type Dialect struct{}

var _ streaming.Dialect = Dialect{}

// API is streaming.APIChat.
func (Dialect) API() streaming.API { return streaming.APIChat }

// NewDecoder returns a decoder for one streamed reply (decode.go).
func (Dialect) NewDecoder() streaming.Decoder { return newDecoder() }

// DecodeJSON decodes a whole reply body (decode.go).
func (Dialect) DecodeJSON(body []byte) (*streaming.Result, error) {
	return decodeJSON(body)
}

// ErrorBody is the OpenAI error body:
// {"error":{"message":msg,"type":typ,"code":typ,"param":null}}.
func (Dialect) ErrorBody(typ, msg string) []byte { return openai.ErrorBody(typ, msg) }

// NewKeepalive returns the keepalive of a held stream: an SSE comment,
// since no chunk would leave the completion the SDKs build unchanged.
func (Dialect) NewKeepalive() streaming.Keepalive { return openai.CommentKeepalive{} }

// ReadExtras reads the 1-hour cache writes and the service tier.
func (Dialect) ReadExtras(x *streaming.Extras, data []byte) { x.Read(data, "@this") }

// NewCallFilter returns a call filter of Chat Completions replies
// (filter.go, hold.go).
func (Dialect) NewCallFilter(allow func(name string) bool, refusal func(call streaming.ToolCall) string) (*streaming.CallFilter, error) {
	return callfilter.NewCallFilter(allow, refusal, newRules)
}

// AssembleJSON turns a whole stream into its ChatCompletion (assemble.go).
func (Dialect) AssembleJSON(stream []byte) ([]byte, error) {
	return assemble(reshape.ReadEvents(stream))
}

// SpliceStream joins a held stream and its continuation's (splice.go).
func (Dialect) SpliceStream(first, cont []byte) ([]byte, error) {
	return spliceStream(first, reshape.ReadEvents(first), reshape.ReadEvents(cont))
}

// SpliceJSON joins a held ChatCompletion and its continuation's (splice.go).
func (Dialect) SpliceJSON(first, cont []byte) ([]byte, error) {
	return reshape.SpliceJSON(streaming.APIChat, first, cont, spliceJSONObjects)
}
