package streaming

import (
	"errors"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/sse"
)

// API names one provider wire format.
type API string

// The wire formats gatekeeper understands.
const (
	APIAnthropic API = "anthropic"        // Anthropic Messages
	APIChat      API = "openai-chat"      // OpenAI Chat Completions (and compatible providers)
	APIResponses API = "openai-responses" // OpenAI Responses
	APIGemini    API = "gemini"           // Gemini generateContent and streamGenerateContent
)

// Sentinel errors.
var (
	// ErrInvalidJSON is returned when a body or event payload is not valid JSON.
	ErrInvalidJSON = errors.New("streaming: invalid JSON")
)

// StopReason is a normalized reason a model stopped. Reasons that no
// normalization covers are kept as the provider's raw string.
type StopReason string

// Normalized stop reasons (the record's last_stop_reason vocabulary).
const (
	StopEndTurn       StopReason = "end_turn"
	StopToolUse       StopReason = "tool_use"
	StopMaxTokens     StopReason = "max_tokens"
	StopSequence      StopReason = "stop_sequence"
	StopRefusal       StopReason = "refusal"
	StopPauseTurn     StopReason = "pause_turn"
	StopContentFilter StopReason = "content_filter"
	StopError         StopReason = "error"
)

// Stop is one stop of one choice (only Chat Completions with n>1 has more
// than one choice).
type Stop struct {
	Choice int
	Reason StopReason
	Raw    string // the provider's own value: "tool_calls", "length", "response.incomplete:max_output_tokens"...
}

// Usage is token usage normalized across APIs. Input is split so that
// InputTokens+CachedInputTokens+CacheWriteTokens is the whole prompt;
// OutputTokens includes ReasoningTokens.
type Usage struct {
	InputTokens       int64 // uncached input
	CachedInputTokens int64 // input read from the prompt cache
	CacheWriteTokens  int64 // input written to the prompt cache
	OutputTokens      int64 // output, reasoning included
	ReasoningTokens   int64 // part of OutputTokens spent on reasoning/thinking
}

// Total is every token counted in u.
func (u Usage) Total() int64 {
	return u.InputTokens + u.CachedInputTokens + u.CacheWriteTokens + u.OutputTokens
}

// ProviderError is an error the provider reported inside a stream or body.
type ProviderError struct {
	Type    string // provider's type or code: "overloaded_error", "insufficient_quota"...
	Message string
	Raw     []byte // the error JSON as received (copied)
}

func (e *ProviderError) Error() string { return "provider error " + e.Type + ": " + e.Message }

// ToolCall is one tool call the model made, as assembled from the stream.
type ToolCall struct {
	Choice int    // Chat Completions choice index; 0 elsewhere
	Index  int    // Anthropic content block index, Chat tool_calls index, Responses output_index
	Type   string // tool_use, server_tool_use, mcp_tool_use, function, or the Responses output item type (function_call, shell_call...)
	ID     string // the id the client answers with: toolu_..., call_...
	ItemID string // Responses output item id (fc_..., ctc_...); empty elsewhere
	Name   string
	// Arguments is the complete arguments text: JSON for function tools
	// ("{}" for an Anthropic call streamed with no input), free text for
	// Responses custom tools.
	Arguments []byte
	// Complete is set when the call's end was seen (content_block_stop,
	// arguments .done / output_item.done, or the choice's finish).
	Complete bool
	// Server is set for calls the provider runs itself (Anthropic
	// server_tool_use): the client never executes or answers them.
	Server bool
	// Ambiguous is set on a call a filter withheld because its reply
	// repeated a member (Result.Ambiguous).
	Ambiguous bool
}

// Result is what a Decoder accumulated over a whole reply.
type Result struct {
	API       API
	MessageID string
	Model     string
	// Stops holds one entry per choice that stopped, in arrival order.
	Stops     []Stop
	ToolCalls []ToolCall
	// Usage is the provider's final report; UsageSeen says whether any
	// report arrived (an explicit zero report is a zero, not a missing value).
	Usage     Usage
	UsageSeen bool
	// UsageFinal says the usage came from the reply's closing report, not
	// only from Anthropic's message_start, whose output_tokens is a
	// placeholder.
	UsageFinal bool
	Errors     []ProviderError
	// Done is set when the stream's terminal event arrived.
	Done bool
	// Truncated is set by Finish when the stream ended without its terminal
	// event: the reply must not be taken as a clean stop.
	Truncated bool
	// OutputBytes counts the bytes of text, thinking, refusal and argument
	// deltas seen, to estimate output when no usage report arrives.
	OutputBytes int64
	// TextBytes counts the bytes of text and refusal alone: a reply with
	// none said nothing to the user.
	TextBytes int64
	// CallSignature is the thoughtSignature of the first call part of a
	// Gemini reply's first candidate, "" when it has none. The Gemini API's
	// calls often carry no id (the client makes one up), but the client
	// replays the signature with the call: it names the reply (ReplyMark).
	CallSignature string
	// Ambiguous is set when an event or the body of the reply repeated a
	// member (two keys equal under case folding) in some object: readers
	// that keep the first and readers that keep the last would read
	// different replies. The reply was read as rewritten into one reading
	// (ValidJSON, Unrepeated), and every client call in it counts as
	// ambiguous: held by the gates that could match its tool, withheld
	// at a restrict stage.
	Ambiguous bool
	// Unparsed counts events that could not be decoded; UnparsedErrors keeps
	// the first few of their errors.
	Unparsed       int
	UnparsedErrors []error
}

// StopReason is the first choice's stop reason, or "" when none arrived.
func (r *Result) StopReason() StopReason {
	if len(r.Stops) == 0 {
		return ""
	}
	return r.Stops[0].Reason
}

// ClientToolCalls are the tool calls the client must execute and answer
// (server-run calls left out), in arrival order.
func (r *Result) ClientToolCalls() []ToolCall {
	var out []ToolCall
	for _, tc := range r.ToolCalls {
		if !tc.Server {
			out = append(out, tc)
		}
	}
	return out
}

// MaxUnparsedErrors bounds Result.UnparsedErrors: the errors of the
// first events that could not be parsed are kept, the rest only counted.
const MaxUnparsedErrors = 8

// AddUnparsed counts an event or member a decoder could not read, keeping
// the first few errors.
func (r *Result) AddUnparsed(err error) {
	r.Unparsed++
	if len(r.UnparsedErrors) < MaxUnparsedErrors {
		r.UnparsedErrors = append(r.UnparsedErrors, err)
	}
}

// Decoder reads the SSE events of one reply into a Result.
type Decoder interface {
	// Decode handles one event. An event that cannot be decoded is counted
	// in Result.Unparsed, never skipped silently.
	Decode(ev *sse.Event)
	// Finish is called once at the end of the stream; it marks the result
	// truncated when the terminal event never came, and returns it.
	Finish() *Result
	// Result is the reply so far.
	Result() *Result
}

// ValidJSON reports whether ev's data is valid JSON, scanning it only the
// first time an event is asked about: the decoder and the call filter read
// the same event one after the other (sse.Event.JSON keeps the answer, in
// the copy the filter gets too), so they scan it once and cannot disagree.
//
// Valid data in which an object repeats a member (keys equal under simple
// case folding) reads one way to gatekeeper's readers, which take the
// first, and another to an agent's, which take the last or match keys
// case-insensitively. Such an event is rewritten in place, its Data and
// Raw replaced by the one reading of jsonscan.Unrepeat (its event and data
// lines framed anew), and marked sse.JSONRepeated: every reader after this
// one, and the agent, read the same bytes. Only such events allocate.
func ValidJSON(ev *sse.Event) bool {
	switch ev.JSON {
	case sse.JSONValid, sse.JSONRepeated:
		return true
	case sse.JSONInvalid:
		return false
	}
	ok := gjson.ValidBytes(ev.Data)
	ev.JSON = sse.JSONInvalid
	if ok {
		ev.JSON = sse.JSONValid
		if jsonscan.Repeats(jsonscan.View(ev.Data)) {
			data := jsonscan.Unrepeat(nil, jsonscan.View(ev.Data))
			ev.Raw = sse.AppendFrame(sse.KeepBOM(nil, ev), jsonscan.View(ev.Name), data)
			ev.Data, ev.JSON = data, sse.JSONRepeated
		}
	}
	return ok
}

// Repeated reports whether ev's data repeated a member (see ValidJSON),
// checking it first if no reader did.
func Repeated(ev *sse.Event) bool {
	return ValidJSON(ev) && ev.JSON == sse.JSONRepeated
}

// Unrepeated is body, a whole reply, in one reading: rewritten as
// ValidJSON rewrites an event when an object in it repeats a member
// (repeated reports it), else body itself.
func Unrepeated(body []byte) (out []byte, repeated bool) {
	js := jsonscan.View(body)
	if !gjson.Valid(js) || !jsonscan.Repeats(js) {
		return body, false
	}
	return jsonscan.Unrepeat(nil, js), true
}

// DoneMarker is the data of the event that ends an OpenAI stream (the
// SDKs match its prefix).
const DoneMarker = "[DONE]"
