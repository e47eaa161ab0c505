package chat

import "gatekeeper/streaming"

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

// ReadExtras reads the 1-hour cache writes and the service tier.
func (Dialect) ReadExtras(x *streaming.Extras, data []byte) { x.Read(data, "@this") }

// The operations below are still done by the streaming root, for the API
// it is given: they share the request reader's members and the call
// filter's per-API state, and move here with them.

func (Dialect) ParseRequest(body []byte) (*streaming.Request, error) {
	return streaming.ParseRequest(streaming.APIChat, body)
}

func (Dialect) RestrictTools(body []byte, keep func(name string) bool) ([]byte, []string, error) {
	return streaming.RestrictTools(streaming.APIChat, body, keep)
}

func (Dialect) NewCallFilter(allow func(name string) bool, refusal func(call streaming.ToolCall) string) (*streaming.CallFilter, error) {
	return streaming.NewCallFilter(streaming.APIChat, allow, refusal)
}

func (Dialect) AssembleJSON(stream []byte) ([]byte, error) {
	return streaming.AssembleJSON(streaming.APIChat, stream)
}

func (Dialect) SpliceStream(first, cont []byte) ([]byte, error) {
	return streaming.SpliceStream(streaming.APIChat, first, cont)
}

func (Dialect) SpliceJSON(first, cont []byte) ([]byte, error) {
	return streaming.SpliceJSON(streaming.APIChat, first, cont)
}
