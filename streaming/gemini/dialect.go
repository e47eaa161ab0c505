package gemini

import (
	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/callfilter"
	"gatekeeper/streaming/internal/reshape"
)

// Dialect is the Gemini API: generateContent and
// streamGenerateContent?alt=sse.
type Dialect struct{}

var _ streaming.Dialect = Dialect{}

// API is streaming.APIGemini.
func (Dialect) API() streaming.API { return streaming.APIGemini }

// NewDecoder returns a decoder for one streamed reply (decode.go).
func (Dialect) NewDecoder() streaming.Decoder { return newDecoder() }

// DecodeJSON decodes a whole generateContent reply body (decode.go).
func (Dialect) DecodeJSON(body []byte) (*streaming.Result, error) { return decodeJSON(body) }

// ReadExtras reads nothing: a Gemini reply names no cache-write duration
// nor a service tier that changes its price.
func (Dialect) ReadExtras(*streaming.Extras, []byte) {}

// NewCallFilter returns a call filter of Gemini replies (filter.go).
func (Dialect) NewCallFilter(allow func(name string) bool, refusal func(call streaming.ToolCall) string) (*streaming.CallFilter, error) {
	return callfilter.NewCallFilter(allow, refusal, newRules)
}

// AssembleJSON turns a whole stream into its reply body (reshape.go).
func (Dialect) AssembleJSON(stream []byte) ([]byte, error) {
	return assemble(reshape.ReadEvents(stream))
}

// SpliceStream joins a held stream and its continuation's (reshape.go).
func (Dialect) SpliceStream(first, cont []byte) ([]byte, error) {
	return spliceStream(first, reshape.ReadEvents(first), reshape.ReadEvents(cont))
}

// SpliceJSON joins a held reply body and its continuation's (reshape.go).
func (Dialect) SpliceJSON(first, cont []byte) ([]byte, error) {
	return reshape.SpliceJSON(streaming.APIGemini, first, cont, spliceJSON)
}
