package streaming

import (
	"github.com/tidwall/gjson"

	"gatekeeper/streaming/internal/callitems"
)

// Telling the agent about a call cut at the output limit.
//
// With Hold, a call the reply did not finish before its output limit is
// dropped, and an agent that sees a clean stop without it cannot tell that
// it was ever asked for. With NoticeCut the filter puts a text block in
// its place, just before the stop, saying what happened.

// NoticeCut makes the filter replace a client tool call that Hold drops
// at a stop for the output limit with a text block of text(call), in an
// Anthropic reply, or with a content chunk of its choice before the finish
// in a Chat Completions one, or with a message item at its output index in
// a Responses one (its final output lists that item in the call's place).
// In a whole
// reply (Body) cut at its output limit, the last call is withheld the
// same way, in every API, and text(call) stands in its place. Call it
// before the first AppendEvent or Body.
func (f *CallFilter) NoticeCut(text func(call ToolCall) string) { f.e.NoticeCut(text) }

// CutCalls lists the client calls of r that a stop at the output limit
// cut while their input was being written: in each choice stopped for its
// output limit, the last client call when its arguments are not whole JSON
// (free-text input, which has no such end, is never listed). These are the
// calls a filter with Hold drops at that stop, and NoticeCut replaces: a
// gate does not judge them, as nobody can approve a call that was never
// finished.
func (r *Result) CutCalls() []ToolCall {
	var out []ToolCall
	for _, s := range r.Stops {
		if s.Reason != StopMaxTokens {
			continue
		}
		last := -1
		for i := range r.ToolCalls {
			if tc := &r.ToolCalls[i]; !tc.Server && tc.Choice == s.Choice {
				last = i
			}
		}
		if last < 0 {
			continue
		}
		tc := r.ToolCalls[last]
		if !freeText(tc) && !gjson.ValidBytes(tc.Arguments) {
			out = append(out, tc)
		}
	}
	return out
}

// freeText reports whether tc's input is free text rather than JSON: a
// Chat custom tool's, or a Responses item's whose table says so.
func freeText(tc ToolCall) bool {
	if tc.Type == "custom" {
		return true
	}
	it, ok := callitems.Lookup(tc.Type, true)
	return ok && it.FreeText
}
