package responses

import "gatekeeper/streaming"

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

// ReadExtras reads the 1-hour cache writes and the service tier.
func (Dialect) ReadExtras(x *streaming.Extras, data []byte) { x.Read(data, "@this", "response") }

// The operations below are still done by the streaming root, for the API
// it is given: they share the request reader's members and the call
// filter's per-API state, and move here with them.

func (Dialect) ParseRequest(body []byte) (*streaming.Request, error) {
	return streaming.ParseRequest(streaming.APIResponses, body)
}

func (Dialect) RestrictTools(body []byte, keep func(name string) bool) ([]byte, []string, error) {
	return streaming.RestrictTools(streaming.APIResponses, body, keep)
}

func (Dialect) NewCallFilter(allow func(name string) bool, refusal func(call streaming.ToolCall) string) (*streaming.CallFilter, error) {
	return streaming.NewCallFilter(streaming.APIResponses, allow, refusal)
}

func (Dialect) AssembleJSON(stream []byte) ([]byte, error) {
	return streaming.AssembleJSON(streaming.APIResponses, stream)
}

func (Dialect) SpliceStream(first, cont []byte) ([]byte, error) {
	return streaming.SpliceStream(streaming.APIResponses, first, cont)
}

func (Dialect) SpliceJSON(first, cont []byte) ([]byte, error) {
	return streaming.SpliceJSON(streaming.APIResponses, first, cont)
}
