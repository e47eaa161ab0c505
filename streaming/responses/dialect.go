package responses

import (
	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/callfilter"
	"gatekeeper/streaming/internal/openai"
	"gatekeeper/streaming/internal/reshape"
)

// Dialect is the OpenAI Responses API.
type Dialect struct{}

var _ streaming.Dialect = Dialect{}

// API is streaming.APIResponses.
func (Dialect) API() streaming.API { return streaming.APIResponses }

// NewDecoder returns a decoder for one streamed reply (decode.go).
func (Dialect) NewDecoder() streaming.Decoder { return newDecoder() }

// DecodeJSON decodes a whole reply body (decode.go).
func (Dialect) DecodeJSON(body []byte) (*streaming.Result, error) {
	return decodeJSON(body)
}

// ErrorBody is the OpenAI error body:
// {"error":{"message":msg,"type":typ,"code":typ,"param":null}}.
func (Dialect) ErrorBody(typ, msg string) []byte { return openai.ErrorBody(typ, msg) }

// ReadExtras reads the 1-hour cache writes and the service tier.
func (Dialect) ReadExtras(x *streaming.Extras, data []byte) { x.Read(data, "@this", "response") }

// NewCallFilter returns a call filter of Responses replies (filter.go,
// hold.go).
func (Dialect) NewCallFilter(allow func(name string) bool, refusal func(call streaming.ToolCall) string) (*streaming.CallFilter, error) {
	return callfilter.NewCallFilter(allow, refusal, newRules)
}

// AssembleJSON turns a whole stream into its Response (assemble.go).
func (Dialect) AssembleJSON(stream []byte) ([]byte, error) { return assembleJSON(stream) }

// SpliceStream joins a held stream and its continuation's (splice.go).
func (Dialect) SpliceStream(first, cont []byte) ([]byte, error) {
	return spliceStream(first, reshape.ReadEvents(first), reshape.ReadEvents(cont))
}

// SpliceJSON joins a held Response and its continuation's (splice.go).
func (Dialect) SpliceJSON(first, cont []byte) ([]byte, error) {
	return reshape.SpliceJSON(streaming.APIResponses, first, cont, splicedResponse)
}
