package streaming_test

import (
	"fmt"

	"gatekeeper/streaming"
	"gatekeeper/streaming/anthropic"
	"gatekeeper/streaming/chat"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/reshape"
	"gatekeeper/streaming/responses"
)

// The tests of the streaming tree that span the three APIs run here, in an
// external package, so that they reach each API through its dialect as the
// proxy does. The names below let them read as if they were inside
// streaming: the vocabulary under its own names, and each operation taking
// the API whose dialect does it.

// dialects is the test's table of the dialects, as the proxy's is.
var dialects = map[streaming.API]streaming.Dialect{
	streaming.APIAnthropic: anthropic.Dialect{},
	streaming.APIChat:      chat.Dialect{},
	streaming.APIResponses: responses.Dialect{},
}

func dialectOf(api streaming.API) (streaming.Dialect, error) {
	d, ok := dialects[api]
	if !ok {
		return nil, fmt.Errorf("%w: %q", streaming.ErrUnknownAPI, string(api))
	}
	return d, nil
}

type (
	API           = streaming.API
	CallFilter    = streaming.CallFilter
	Decoder       = streaming.Decoder
	Dialect       = streaming.Dialect
	Extras        = streaming.Extras
	Keepalive     = streaming.Keepalive
	ProviderError = streaming.ProviderError
	Request       = streaming.Request
	Result        = streaming.Result
	Stop          = streaming.Stop
	StopReason    = streaming.StopReason
	ToolCall      = streaming.ToolCall
	ToolResult    = streaming.ToolResult
	Usage         = streaming.Usage
)

const (
	APIAnthropic      = streaming.APIAnthropic
	APIChat           = streaming.APIChat
	APIResponses      = streaming.APIResponses
	StopContentFilter = streaming.StopContentFilter
	StopEndTurn       = streaming.StopEndTurn
	StopError         = streaming.StopError
	StopMaxTokens     = streaming.StopMaxTokens
	StopPauseTurn     = streaming.StopPauseTurn
	StopRefusal       = streaming.StopRefusal
	StopSequence      = streaming.StopSequence
	StopToolUse       = streaming.StopToolUse
	DoneMarker        = streaming.DoneMarker
)

var (
	ErrUnknownAPI       = streaming.ErrUnknownAPI
	ErrInvalidJSON      = streaming.ErrInvalidJSON
	ErrIncompleteStream = streaming.ErrIncompleteStream
	ErrNoCallPolicy     = streaming.ErrNoCallPolicy
	ErrNoConversation   = streaming.ErrNoConversation
	ErrNoToolResult     = streaming.ErrNoToolResult
	CallDigest          = streaming.CallDigest
	EnsureIncludeUsage  = streaming.EnsureIncludeUsage
	StripUsage          = streaming.StripUsage
)

func NewDecoder(api API) (Decoder, error) {
	d, err := dialectOf(api)
	if err != nil {
		return nil, err
	}
	return d.NewDecoder(), nil
}

func DecodeJSON(api API, body []byte) (*Result, error) {
	d, err := dialectOf(api)
	if err != nil {
		return nil, err
	}
	return d.DecodeJSON(body)
}

func ParseRequest(api API, body []byte) (*Request, error) {
	d, err := dialectOf(api)
	if err != nil {
		return nil, err
	}
	return d.ParseRequest(body)
}

func AppendNotice(api API, body []byte, text string) ([]byte, error) {
	d, err := dialectOf(api)
	if err != nil {
		return nil, err
	}
	return d.AppendNotice(body, text)
}

func RestrictTools(api API, body []byte, keep func(name string) bool) ([]byte, []string, error) {
	d, err := dialectOf(api)
	if err != nil {
		return nil, nil, err
	}
	return d.RestrictTools(body, keep)
}

func NewCallFilter(api API, allow func(name string) bool, refusal func(call ToolCall) string) (*CallFilter, error) {
	d, err := dialectOf(api)
	if err != nil {
		return nil, err
	}
	return d.NewCallFilter(allow, refusal)
}

func AssembleJSON(api API, stream []byte) ([]byte, error) {
	d, err := dialectOf(api)
	if err != nil {
		return nil, err
	}
	return d.AssembleJSON(stream)
}

func RenderSSE(api API, body []byte) ([]byte, error) {
	d, err := dialectOf(api)
	if err != nil {
		return nil, err
	}
	return d.RenderSSE(body)
}

func Continuation(api API, request, reply []byte, streamed bool, results map[string][]byte) ([]byte, error) {
	d, err := dialectOf(api)
	if err != nil {
		return nil, err
	}
	return d.Continuation(request, reply, streamed, results)
}

func SpliceStream(api API, first, cont []byte) ([]byte, error) {
	d, err := dialectOf(api)
	if err != nil {
		return nil, err
	}
	return d.SpliceStream(first, cont)
}

func SpliceJSON(api API, first, cont []byte) ([]byte, error) {
	d, err := dialectOf(api)
	if err != nil {
		return nil, err
	}
	return d.SpliceJSON(first, cont)
}

func newAnthropicDecoder() Decoder { return anthropic.Dialect{}.NewDecoder() }
func newChatDecoder() Decoder      { return chat.Dialect{}.NewDecoder() }
func newResponsesDecoder() Decoder { return responses.Dialect{}.NewDecoder() }

func decodeAnthropicJSON(body []byte) (*Result, error) { return anthropic.Dialect{}.DecodeJSON(body) }

// Internals the tests check against.
const (
	maxUnparsedErrors = streaming.MaxUnparsedErrors
	maxNesting        = jsonscan.MaxNesting
	maxCanonicalDepth = streaming.MaxCanonicalDepth
	billingPrefix     = "x-anthropic-billing-header" // anthropic's
)

var (
	sumUsage = reshape.SumUsage
)
