package callfilter

import (
	"slices"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/reshape"
	"gatekeeper/streaming/sse"
)

// Rules are one API's reading of its events and bodies: what a dialect
// gives the engine so that the engine needs no API of its own. Each
// dialect package has one implementation, which embeds the *Filter it
// runs with.
type Rules interface {
	// API is the wire format the rules read.
	API() streaming.API
	// FilterEvent appends what the client receives for ev, an event with
	// data (streaming.CallFilter.AppendEvent).
	FilterEvent(dst []byte, ev *sse.Event) []byte
	// FilterBody rewrites the whole reply js (a valid JSON object), nil
	// when nothing changes (streaming.CallFilter.Body).
	FilterBody(js string) []byte
	// MarkBodyCut adds to CutIDs the calls of the whole reply js it was
	// still writing at its output limit (streaming.CallFilter.NoticeCut).
	MarkBodyCut(js string)
	// AppendEnd appends the API's own error event carrying typ and msg,
	// which ends the reply (streaming.CallFilter.End).
	AppendEnd(dst []byte, typ, msg string) []byte
	// AppendPassed appends an event passed while a call was held, as the
	// API numbers it now (AppendHeld when nothing in it moves).
	AppendPassed(dst []byte, e *Event) []byte
}

// Filter is the call filter of one reply: what every API shares of
// withholding refused calls and holding the others until they are whole,
// run by the API's Rules. It satisfies streaming.FilterEngine. It is not
// safe for concurrent use.
type Filter struct {
	rules   Rules
	allow   func(name string) bool
	refusal func(call streaming.ToolCall) string
	// CutNotice, when set, gives the text that replaces a call cut at the
	// output limit (NoticeCut).
	CutNotice func(call streaming.ToolCall) string
	// CutIDs are the calls of a whole reply that it was still writing at
	// its output limit (Rules.MarkBodyCut): withheld, the notice in their
	// place.
	CutIDs []string

	// RefusedCalls are the calls withheld so far, Texts the text that
	// replaced each.
	RefusedCalls []streaming.ToolCall
	Texts        []string
	// refuseIDs are the ids of calls refused whatever their name
	// (RefuseCalls).
	refuseIDs []string
	// granted: allow is a grant, which never covers a call of an unknown
	// type (Grant), nor a call of an ambiguous reply.
	granted bool
	// repeated: an event or the body of the reply repeated a member
	// (streaming.ValidJSON rewrote it into one reading). From then on a
	// grant permits no call.
	repeated bool

	Held Holds
	Seen bool // an event came
	// ev is the event being filtered: the rules get a pointer to it here,
	// which a pointer to AppendEvent's own copy would make escape, one
	// allocation per event.
	ev sse.Event

	// Scratch is one rewritten payload before it is framed.
	Scratch    []byte
	scratchBuf [512]byte
}

var _ streaming.FilterEngine = (*Filter)(nil)

// New returns a filter for one reply, run by the rules rules(f) gives.
// allow reports whether a call to the named tool may be delivered;
// refusal gives the text that replaces a refused call. It fails with
// streaming.ErrNoCallPolicy when either is nil.
func New(allow func(name string) bool, refusal func(call streaming.ToolCall) string, rules func(f *Filter) Rules) (*Filter, error) {
	if allow == nil || refusal == nil {
		return nil, streaming.ErrNoCallPolicy
	}
	return newFilter(allow, refusal, rules), nil
}

// Passing returns a filter that refuses nothing, run by the rules rules(f)
// gives: what the prefix of a held reply is computed with (Prefix).
func Passing(rules func(f *Filter) Rules) *Filter {
	return newFilter(func(string) bool { return true }, func(streaming.ToolCall) string { return "" }, rules)
}

func newFilter(allow func(name string) bool, refusal func(call streaming.ToolCall) string, rules func(f *Filter) Rules) *Filter {
	f := &Filter{allow: allow, refusal: refusal}
	f.Scratch = f.scratchBuf[:0]
	f.rules = rules(f)
	return f
}

// Prefix runs the filter, with Hold, over the first n events of stream
// and returns what the client received, then what came after the first
// held call less the calls: the part of a held reply the client has, or
// gets before a continuation (SpliceStream).
//
// Like reshape.ReadEvents it cannot fail: sse.Each fails only when its
// callback does, or an event outgrows the stream.
func (f *Filter) Prefix(stream []byte, n int) []byte {
	f.Hold()
	var out []byte
	i := 0
	_ = sse.Each(stream, func(ev *sse.Event) error {
		if i < n {
			out = f.AppendEvent(out, *ev)
		}
		i++
		return nil
	})
	f.DropHeld(func(int, *Call) bool { return true })
	return f.FlushPassed(out)
}

// Refused lists the calls withheld so far.
func (f *Filter) Refused() []streaming.ToolCall { return slices.Clone(f.RefusedCalls) }

// AppendEvent appends to dst what the client receives for ev
// (streaming.CallFilter.AppendEvent).
func (f *Filter) AppendEvent(dst []byte, ev sse.Event) []byte {
	if f.Held.Ended {
		return dst
	}
	f.Seen = true
	n := len(dst)
	switch {
	case !ev.HasData && f.Held.Suffix():
		f.Held.KeepPassed(sse.TrimBOM(ev.Raw), -1, ev.Unterminated)
	case !ev.HasData:
		dst = append(dst, ev.Raw...)
	default:
		f.ev = ev
		// Checked here when no decoder read the event first: the rules
		// read, and forward, what it rewrote.
		if streaming.Repeated(&f.ev) {
			f.repeated = true
		}
		dst = f.rules.FilterEvent(dst, &f.ev)
		f.ev = sse.Event{} // the rules keep nothing of it
	}
	if len(dst) > n {
		f.Held.OpenTail = ev.Unterminated
	}
	return dst
}

// Body rewrites a whole non-streamed reply (streaming.CallFilter.Body).
func (f *Filter) Body(body []byte) ([]byte, error) {
	// A reply repeating a member goes out in the one reading the decoders
	// read (streaming.Unrepeated).
	body, repeated := streaming.Unrepeated(body)
	f.repeated = f.repeated || repeated
	js, err := reshape.ReplyObject(f.rules.API(), body)
	if err != nil {
		return nil, err
	}
	if f.CutNotice != nil {
		f.rules.MarkBodyCut(js)
		f.CutIDs = slices.DeleteFunc(f.CutIDs, func(id string) bool { return id == "" })
	}
	if out := f.rules.FilterBody(js); out != nil {
		return out, nil
	}
	return body, nil
}

// Refuse records a withheld call and returns the text that replaces it.
func (f *Filter) Refuse(tc streaming.ToolCall) string {
	tc.Ambiguous = f.repeated
	var text string
	if f.IsCut(tc.ID) {
		text = f.CutNotice(tc)
	} else {
		text = f.refusal(tc)
	}
	f.RefusedCalls = append(f.RefusedCalls, tc)
	f.Texts = append(f.Texts, text)
	return text
}

// Ambiguous reports whether an event or the body of the reply so far
// repeated a member (streaming.CallFilter.Ambiguous).
func (f *Filter) Ambiguous() bool { return f.repeated }

// Grant marks allow as a grant (streaming.CallFilter.Grant).
func (f *Filter) Grant() { f.granted = true }

// RefuseCalls refuses the calls with these ids whatever their name
// (streaming.CallFilter.RefuseCalls).
func (f *Filter) RefuseCalls(ids ...string) {
	for _, id := range ids {
		if id != "" && !slices.Contains(f.refuseIDs, id) {
			f.refuseIDs = append(f.refuseIDs, id)
		}
	}
}

// NoticeCut sets the text of a call cut at the output limit
// (streaming.CallFilter.NoticeCut).
func (f *Filter) NoticeCut(text func(call streaming.ToolCall) string) {
	if !f.Seen {
		f.CutNotice = text
	}
}

// IsCut reports whether MarkBodyCut found the call with id cut.
func (f *Filter) IsCut(id string) bool { return id != "" && slices.Contains(f.CutIDs, id) }

// PermitsItem is PermitsCall for a Responses call item, unknown telling
// whether its type is unknown.
func (f *Filter) PermitsItem(unknown bool, id, name string) bool {
	return !(unknown && f.granted) && f.PermitsCall(id, name)
}

// PermitsCall judges a call by its id and its names: RefuseCalls named
// neither its id, and Permits passes its names.
func (f *Filter) PermitsCall(id string, names ...string) bool {
	return (id == "" || !slices.Contains(f.refuseIDs, id) && !f.IsCut(id)) && f.Permits(names...)
}

// Permits judges the names a call carries: every one must be allowed, and a
// call that names no tool is judged as the empty name. Under a grant, no
// call of an ambiguous reply is permitted: read-only or not, it is
// withheld.
func (f *Filter) Permits(names ...string) bool {
	if f.repeated && f.granted {
		return false
	}
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

// Renames reports whether a later fragment of an allowed call names a tool
// that is not allowed: the decoders take a name from any fragment until the
// call has one.
func (f *Filter) Renames(names ...string) bool {
	for _, n := range names {
		if n != "" && !f.allow(n) {
			return true
		}
	}
	return false
}

// NewCallFilter returns the CallFilter of one reply, its engine run by the
// rules newRules makes (a dialect's streaming.Dialect.NewCallFilter). It
// fails with streaming.ErrNoCallPolicy when allow or refusal is nil.
func NewCallFilter[R Rules](allow func(name string) bool, refusal func(call streaming.ToolCall) string, newRules func(*Filter) R) (*streaming.CallFilter, error) {
	f, err := New(allow, refusal, func(f *Filter) Rules { return newRules(f) })
	if err != nil {
		return nil, err
	}
	return streaming.NewCallFilter(f), nil
}

// HeldPrefix is what a filter with Hold that refuses nothing gives for the
// first n events of stream, less the held calls (Prefix), and the rules
// newRules made for it, which the splice reads on from.
func HeldPrefix[R Rules](stream []byte, n int, newRules func(*Filter) R) ([]byte, R) {
	var r R
	f := Passing(func(f *Filter) Rules {
		r = newRules(f)
		return r
	})
	return f.Prefix(stream, n), r
}
