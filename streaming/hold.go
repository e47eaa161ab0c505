package streaming

// Holding client tool calls until they are safe to deliver.
//
// A call must reach the agent whole or not at all. A reply the provider cut
// at its output limit, or one an operator canceled, may stop in the middle
// of a call, and what the agent makes of half a call is up to the agent
// (Claude Code takes a stream that ends cleanly inside a tool_use for a
// finished reply and loses the call without a word). With Hold the filter
// keeps the events of every client call until the reply's stop tells
// whether the calls are whole, and delivers them just before that stop; End
// drops whatever is held and closes the reply with the provider's own error
// event, which the SDKs raise.
//
// A held call holds what comes after it: in Anthropic and Chat, every
// event after a held call's first one (a ping, text, another choice's
// chunks, another call) waits with it and goes out in the provider's
// order once no call before it is held, so that the client gets a prefix
// of what the provider sent. Only a call dropped (or refused) moves what
// refers to positions in the stream, and the filter fixes that up as it
// goes: Anthropic block indices close the gap it leaves. In Responses,
// events that are not a held call's (comments aside) still go out at
// once, and the held calls are moved just before the stop: block and
// output indices follow the order in which the client receives blocks and
// items (the SDKs append each new one and find it again by that index),
// and Responses sequence numbers stay one apart. Text, thinking and the
// calls the provider runs itself are never held themselves: before a held
// call the agent sees them as they come.

// Hold makes the filter keep every client tool call's events (Anthropic
// tool_use blocks, Chat tool_calls deltas, Responses client call items:
// function_call, custom_tool_call, local_shell_call, shell_call,
// apply_patch_call, computer_call and unknown *_call items with a call_id,
// see internal/callitems) instead of passing them on, until the reply's stop
// is known (Anthropic message_delta with a stop_reason; Chat the
// finish_reason of the call's choice; Responses response.completed,
// .incomplete or .failed). Then the held calls are delivered, in their
// places relative to each other, just before the stop event, except a call
// the reply did not finish:
//
//   - at a stop for the output limit (Anthropic max_tokens or
//     model_context_window_exceeded, Chat length, Responses incomplete for
//     max_output_tokens), the last call when its arguments are not complete
//     JSON (or are free text, in Chat, where nothing marks an input done);
//   - at any stop, a call whose end never came (no Anthropic
//     content_block_stop; no Responses .done event nor completed item).
//
// Those are dropped and listed by Withheld; the stop reason is kept as the
// provider sent it. A provider error event, or the stream's terminal marker
// ([DONE], message_stop) coming before the stop, drops what is held. What
// came after a held call's first event (text, thinking, server-tool
// events, pings, comments) waits for it and goes out in its place
// (Anthropic and Chat; in Responses only comments wait).
//
// Call Hold before the first AppendEvent; later it has no effect.
func (f *CallFilter) Hold() { f.e.Hold() }

// End appends the bytes that end the reply now with the provider's own error
// event carrying typ and msg, and drops every held call (listed by
// Withheld):
//
//   - Anthropic: event: error, {"type":"error","error":{"type","message"}};
//   - Chat: a data-only {"error":{"message","type","code","param"}} chunk,
//     with code set to typ;
//   - Responses: event: error, {"type":"error","code","message","param":null,
//     "sequence_number"}, numbered after the last event delivered (omitted
//     when the stream numbers none of its events).
//
// After End, AppendEvent appends nothing and End itself no more. Calls
// already delivered stay delivered: with Hold they were whole.
func (f *CallFilter) End(dst []byte, typ, msg string) []byte { return f.e.End(dst, typ, msg) }

// Holding reports whether any call's bytes are held now.
func (f *CallFilter) Holding() bool { return f.e.Holding() }

// Withheld lists every call the agent did not receive: the refused ones (as
// Refused lists them), then the held ones dropped, in the order they were
// dropped.
func (f *CallFilter) Withheld() []ToolCall { return f.e.Withheld() }
