package streaming

import "gatekeeper/streaming/sse"

// Dialect is everything one API means to the proxy: how its replies decode,
// how its requests read and are rewritten, how its held replies are
// reshaped, and how a held stream of it stays alive. Each API is one package
// below streaming with a Dialect value (anthropic.Dialect, chat.Dialect,
// responses.Dialect); the proxy binds one per request from its table of
// APIs, so adding an API is one new package and one line there.
type Dialect interface {
	// API is the wire format the dialect speaks.
	API() API

	// NewDecoder returns a decoder for one streamed reply.
	NewDecoder() Decoder
	// DecodeJSON decodes a whole non-streaming reply body into the Result a
	// stream of that reply would give. An error body decodes to a Result
	// with its ProviderError; a body that is not a reply fails with an
	// error wrapping ErrInvalidJSON.
	DecodeJSON(body []byte) (*Result, error)
	// ReadExtras updates x from one event's data, or from a whole reply.
	ReadExtras(x *Extras, data []byte)

	// ParseRequest reads what gatekeeper needs of a request body.
	ParseRequest(body []byte) (*Request, error)
	// AppendNotice returns body with a user message holding text added as
	// the last item of the conversation.
	AppendNotice(body []byte, text string) ([]byte, error)
	// RestrictTools returns body without the declared tools keep refuses,
	// and the names it removed.
	RestrictTools(body []byte, keep func(name string) bool) (out []byte, removed []string, err error)

	// NewCallFilter returns a filter that withholds the client tool calls
	// allow refuses from a reply of the dialect as it streams.
	NewCallFilter(allow func(name string) bool, refusal func(call ToolCall) string) (*CallFilter, error)

	// AssembleJSON turns a whole stream into the body the same reply
	// would have had unstreamed.
	AssembleJSON(stream []byte) ([]byte, error)
	// RenderSSE turns a whole reply body into the stream that carries it.
	RenderSSE(body []byte) ([]byte, error)
	// Continuation is the request that answers a held reply's refused calls.
	Continuation(request, reply []byte, streamed bool, results map[string][]byte) ([]byte, error)
	// SpliceStream joins a held stream and its continuation's into one.
	SpliceStream(first, cont []byte) ([]byte, error)
	// SpliceJSON joins a held body and its continuation's into one.
	SpliceJSON(first, cont []byte) ([]byte, error)

	// NewKeepalive returns the keepalive of one held stream.
	NewKeepalive() Keepalive
	// ErrorBody is an error of type typ saying msg, in the API's own
	// format: what its SDKs read as an API error.
	ErrorBody(typ, msg string) []byte
}

// A held stream must look alive to the agent for as long as people take to
// decide, and the agents' idle watchdogs count only events their SDK hands
// them: Claude Code aborts a reply after 300 s without one (and does not
// retry once a content block was shown), Codex after stream_idle_timeout_ms
// (300 s, then a retry of the turn, at most stream_max_retries times). The
// Anthropic SDKs drop ping events and every SSE parser drops comments, so
// neither resets them. The keepalive of a held stream is therefore an event
// the SDK does yield but that leaves the reply it accumulates as it is:
//
//   - Anthropic: a message_delta with a null stop_reason and the output
//     usage the client already has. The SDKs' accumulators set the stop
//     reason and usage from it; the held reply's own message_delta sets
//     both again before message_stop.
//   - OpenAI Responses: the reply's own response.in_progress event again
//     (the response.created event renamed when the provider sent no
//     in_progress): the same response object, which accumulators ignore and
//     Codex skips after counting it.
//   - OpenAI Chat Completions: an SSE comment, as there is no chunk that
//     changes nothing for every SDK.
//
// Keepalive is that event, built from the events forwarded before the hold;
// before the reply's opening event went out there is nothing an SDK would
// take without changing its reply, and the dialect's plain keepalive (a
// ping event, an SSE comment) is used.
type Keepalive interface {
	// Forwarded notes an event that went to the client; res is the
	// decoder's result once the event was decoded.
	Forwarded(ev *sse.Event, res *Result)
	// Event is the keepalive to send now.
	Event() []byte
}
