package streaming

import "gatekeeper/streaming/sse"

// Dialect is everything one API means to the proxy: how its replies decode,
// how its requests read and are rewritten, how its held replies are
// reshaped, and how a held stream of it stays alive. Each API is one package
// below streaming with a Dialect value (anthropic.Dialect, chat.Dialect,
// responses.Dialect, gemini.Dialect); the proxy binds one per request from its table of
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
	// allow refuses from a reply of the dialect as it streams. allow
	// reports whether a call to the named tool may be delivered; refusal
	// gives the text that replaces a refused call (e.g. "gatekeeper
	// withheld a call to Bash: ..."). Either nil fails with
	// ErrNoCallPolicy. allow is called with a view of the event being
	// filtered, so that letting a call through costs no copy: it must not
	// keep name past its return.
	NewCallFilter(allow func(name string) bool, refusal func(call ToolCall) string) (*CallFilter, error)

	// AssembleJSON returns the non-streamed reply body the provider would have
	// sent for a complete stream (Anthropic Message, Chat ChatCompletion,
	// Responses Response object), content exactly as streamed (thinking blocks
	// and signatures included). ErrIncompleteStream when the stream has no
	// stop/terminal event, or ends on a provider error; ErrInvalidJSON when an
	// event's data is not JSON, or a tool call's streamed input is not.
	AssembleJSON(stream []byte) ([]byte, error)
	// RenderSSE turns a whole reply body into the stream that carries it.
	RenderSSE(body []byte) ([]byte, error)
	// Continuation is the request that answers a held reply's refused calls.
	Continuation(request, reply []byte, streamed bool, results map[string][]byte) ([]byte, error)
	// SpliceStream returns one stream that reads as a single reply: first
	// without its client tool calls and without its stop and terminal events,
	// then cont's content (its start events dropped; indices, output_index and
	// sequence_number renumbered to follow first's), cont's stop and terminal
	// events, with usage summed over both calls. ids and model stay first's.
	//
	// Both streams must be whole replies (ErrIncompleteStream otherwise).
	// first's part is what a CallFilter in Hold mode that refuses nothing gives
	// for first's events before its stop event.
	SpliceStream(first, cont []byte) ([]byte, error)
	// SpliceJSON does what SpliceStream does for non-streamed bodies: first's
	// body (its id, model and everything else), its content without client
	// tool calls followed by cont's (Anthropic content blocks, Chat message
	// content and refusal text, Responses output items), cont's stop and tool
	// calls, usage summed.
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
