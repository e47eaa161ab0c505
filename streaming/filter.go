package streaming

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"gatekeeper/streaming/sse"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming/internal/jsonscan"
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
// shows the call whole (hold.go), and End cuts a reply short.

// ErrNoCallPolicy is returned by NewCallFilter when allow or refusal is nil.
var ErrNoCallPolicy = errors.New("streaming: a call filter needs an allow and a refusal function")

// CallFilter withholds the client tool calls of one reply that allow
// refuses and, with Hold, delivers the others only whole. It is not safe
// for concurrent use.
type CallFilter struct {
	api     API
	allow   func(name string) bool
	refusal func(call ToolCall) string
	// cutNotice, when set, gives the text that replaces a call cut at the
	// output limit (NoticeCut).
	cutNotice func(call ToolCall) string
	// cutIDs are the calls of a whole reply that it was still writing at
	// its output limit (markBodyCut): withheld, the notice in their place.
	cutIDs []string

	refused []ToolCall
	texts   []string // the text that replaced each refused call
	// refuseIDs are the ids of calls refused whatever their name
	// (RefuseCalls).
	refuseIDs []string
	// grant: allow is a grant, which never covers a call of an unknown
	// type (Grant).
	grant bool

	anthropic anthropicCallFilter
	chat      chatCallFilter
	responses responsesCallFilter

	hold holdState
	seen bool // an event came

	scratch    []byte // one rewritten payload before it is framed
	scratchBuf [512]byte
}

// NewCallFilter returns a filter for one reply. allow reports whether a call
// to the named tool may be delivered; refusal gives the text that replaces a
// refused call (e.g. "gatekeeper withheld a call to Bash: ...").
//
// allow is called with a view of the event being filtered, so that letting a
// call through costs no copy: it must not keep name past its return.
func NewCallFilter(api API, allow func(name string) bool, refusal func(call ToolCall) string) (*CallFilter, error) {
	switch api {
	case APIAnthropic, APIChat, APIResponses:
	default:
		return nil, fmt.Errorf("%w: %q", ErrUnknownAPI, string(api))
	}
	if allow == nil || refusal == nil {
		return nil, ErrNoCallPolicy
	}
	f := &CallFilter{api: api, allow: allow, refusal: refusal}
	f.scratch = f.scratchBuf[:0]
	f.anthropic.pos.init()
	f.chat.init()
	f.responses.init()
	return f, nil
}

// Refused lists the calls withheld so far (ID, Name, Index/Choice as the
// decoders fill them).
func (f *CallFilter) Refused() []ToolCall { return slices.Clone(f.refused) }

// AppendEvent appends to dst what the client receives for ev, one whole SSE
// event as Reader hands it: usually ev.Raw unchanged, nothing while a refused
// (or, with Hold, a held) call streams, or rewritten and inserted events,
// the held calls among them. Events it writes itself are framed
// "event: x\n" (when ev had an event line) and "data: ...\n\n".
//
// After End it appends nothing.
func (f *CallFilter) AppendEvent(dst []byte, ev sse.Event) []byte {
	if f.hold.ended {
		return dst
	}
	f.seen = true
	n := len(dst)
	switch {
	case !ev.HasData && f.hold.suffix():
		f.hold.keepPassed(sse.TrimBOM(ev.Raw), -1, ev.Unterminated)
	case !ev.HasData:
		dst = append(dst, ev.Raw...)
	case f.api == APIAnthropic:
		dst = f.anthropicEvent(dst, &ev)
	case f.api == APIChat:
		dst = f.chatEvent(dst, &ev)
	default:
		dst = f.responsesEvent(dst, &ev)
	}
	if len(dst) > n {
		f.hold.openTail = ev.Unterminated
	}
	return dst
}

// Body rewrites a whole non-streamed reply the same way. A body with nothing
// to withhold is returned as it came; one that is not a JSON object fails
// with an error wrapping ErrInvalidJSON.
func (f *CallFilter) Body(body []byte) ([]byte, error) {
	js, err := ReplyObject(f.api, body)
	if err != nil {
		return nil, err
	}
	if f.cutNotice != nil {
		f.markBodyCut(js) // filter_cut.go
	}
	var out []byte
	switch f.api {
	case APIAnthropic:
		out = f.anthropicBody(js)
	case APIChat:
		if f.chatPlan(js, true).changed {
			out = f.chatEdit(nil, js, true)
		}
	case APIResponses:
		out = f.responsesBody(js)
	}
	if out == nil {
		return body, nil
	}
	return out, nil
}

// refuse records a withheld call and returns the text that replaces it.
func (f *CallFilter) refuse(tc ToolCall) string {
	var text string
	if f.isCut(tc.ID) {
		text = f.cutNotice(tc)
	} else {
		text = f.refusal(tc)
	}
	f.refused = append(f.refused, tc)
	f.texts = append(f.texts, text)
	return text
}

// ReplyObject returns a whole reply body, less surrounding whitespace, as
// a string viewing body's bytes; a body that is not a valid JSON object
// fails with an error wrapping ErrInvalidJSON.
func ReplyObject(api API, body []byte) (string, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' || !gjson.ValidBytes(trimmed) {
		return "", fmt.Errorf("%w: %s reply body", ErrInvalidJSON, api)
	}
	return jsonscan.View(trimmed), nil
}

// Grant marks allow as a grant (a restrict stage's read-only tools): a
// Responses call item of a type gatekeeper does not know (any "*_call"
// with a call_id outside the table in internal/callitems) is then refused
// whatever its name, since no grant can say what it does. Call before the
// first AppendEvent or Body.
func (f *CallFilter) Grant() { f.grant = true }

// permitsItem is permitsCall for a Responses call item, unknown telling
// whether its type is unknown.
func (f *CallFilter) permitsItem(unknown bool, id, name string) bool {
	return !(unknown && f.grant) && f.permitsCall(id, name)
}

// permitsCall judges a call by its id and its names: RefuseCalls named
// neither its id, and permits passes its names.
func (f *CallFilter) permitsCall(id string, names ...string) bool {
	return (id == "" || !slices.Contains(f.refuseIDs, id) && !f.isCut(id)) && f.permits(names...)
}

// permits judges the names a call carries: every one must be allowed, and a
// call that names no tool is judged as the empty name.
func (f *CallFilter) permits(names ...string) bool {
	named := false
	for _, n := range names {
		if n != "" {
			named = true
			if !f.allow(n) {
				return false
			}
		}
	}
	return named || f.allow("")
}

// renames reports whether a later fragment of an allowed call names a tool
// that is not allowed: the decoders take a name from any fragment until the
// call has one.
func (f *CallFilter) renames(names ...string) bool {
	for _, n := range names {
		if n != "" && !f.allow(n) {
			return true
		}
	}
	return false
}
