package streaming

import (
	"errors"

	"gatekeeper/streaming/sse"
)

// Withholding refused tool calls from a reply.
//
// When a grant narrows (a budget's restrict stage, an approval gate), a call
// to a tool outside it must never reach the agent, and the agent must still
// get a reply it can continue from. CallFilter stands between the Reader and
// the client: an event it has no reason to touch goes out as the same bytes;
// a refused call is replaced, where it stood, by a text saying why, and what
// refers to it (indices, stop reasons, sequence numbers, the final output)
// is fixed up so that the reply stays coherent.
//
// Its reading of each event follows the decoders' (which duplicate member
// wins, how calls are keyed), so that the package decodes no refused call
// from what it lets through. Where a malformed event leaves room for doubt it
// withholds rather than passes.
//
// With Hold it also keeps every call it lets through until the reply's stop
// shows the call whole (Hold), and End cuts a reply short.

// ErrNoCallPolicy is returned by a dialect's NewCallFilter when allow or
// refusal is nil.
var ErrNoCallPolicy = errors.New("streaming: a call filter needs an allow and a refusal function")

// CallFilter withholds the client tool calls of one reply that allow
// refuses and, with Hold, delivers the others only whole. It is not safe
// for concurrent use.
//
// A dialect's NewCallFilter makes one (see Dialect.NewCallFilter): the
// engine every API shares (streaming/internal/callfilter) run by the
// dialect's own reading of its events.
type CallFilter struct{ e FilterEngine }

// FilterEngine is what a CallFilter runs: the call-filter engine with one
// API's rules, as a dialect builds it. Its methods are CallFilter's.
type FilterEngine interface {
	AppendEvent(dst []byte, ev sse.Event) []byte
	Body(body []byte) ([]byte, error)
	Refused() []ToolCall
	Withheld() []ToolCall
	Holding() bool
	Hold()
	End(dst []byte, typ, msg string) []byte
	Grant()
	Ambiguous() bool
	RefuseCalls(ids ...string)
	NoticeCut(text func(call ToolCall) string)
}

// NewCallFilter wraps a dialect's filter engine.
func NewCallFilter(e FilterEngine) *CallFilter { return &CallFilter{e: e} }

// Refused lists the calls withheld so far (ID, Name, Index/Choice as the
// decoders fill them).
func (f *CallFilter) Refused() []ToolCall { return f.e.Refused() }

// AppendEvent appends to dst what the client receives for ev, one whole SSE
// event as Reader hands it: usually ev.Raw unchanged, nothing while a refused
// (or, with Hold, a held) call streams, or rewritten and inserted events,
// the held calls among them. Events it writes itself are framed
// "event: x\n" (when ev had an event line) and "data: ...\n\n".
//
// After End it appends nothing.
func (f *CallFilter) AppendEvent(dst []byte, ev sse.Event) []byte { return f.e.AppendEvent(dst, ev) }

// Body rewrites a whole non-streamed reply the same way. A body with nothing
// to withhold is returned as it came; one that is not a JSON object fails
// with an error wrapping ErrInvalidJSON.
func (f *CallFilter) Body(body []byte) ([]byte, error) { return f.e.Body(body) }

// Ambiguous reports whether an event or the body of the reply so far
// repeated a member: the filter forwarded it rewritten into one reading
// (ValidJSON, Unrepeated), which the agent and a decoder of what it
// forwarded read alike, but which is not the reply the provider sent. The
// reply's calls count as ambiguous (Result.Ambiguous).
func (f *CallFilter) Ambiguous() bool { return f.e.Ambiguous() }

// Grant marks allow as a grant (a restrict stage's read-only tools): a
// Responses call item of a type gatekeeper does not know (any "*_call"
// with a call_id outside the table in internal/callitems) is then refused
// whatever its name, since no grant can say what it does. Call before the
// first AppendEvent or Body.
func (f *CallFilter) Grant() { f.e.Grant() }
