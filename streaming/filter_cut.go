package streaming

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
