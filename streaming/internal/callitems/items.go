package callitems

import (
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming/internal/jsonscan"
)

// The Responses output items that are calls, in one table. The decoder, the
// call filter, the escrow's hold, the continuation and the request reader
// all look a call item up here, so that a type is a call everywhere or
// nowhere.
//
// A client call is one the agent executes: gates see it under its name
// with its input, a restrict stage withholds it unless granted, and the
// record waits for its output item in the next request. A hosted call is
// one the provider runs: it is recorded, never gated.

// Item describes one output item type that is a call.
type Item struct {
	Typ string // the output item type
	// name is the name gates see; "" takes the item's own name member.
	Name string
	// input is the member holding what the call does, which gates read as
	// tool.input; "" takes the whole item.
	Input string
	// output is the input item type that answers a client call, and
	// outputID the member of it that names the call.
	Output, OutputID string
	Hosted           bool
	// freeText marks an input that is free text rather than JSON.
	FreeText bool
	// unknown marks a client call of a type this table does not know: no
	// grant covers it.
	Unknown bool
	// answer appends the output item that answers the call with text, when
	// the call is refused (the continuation).
	Answer func(dst []byte, callID, text string) []byte
}

// table are the call item types known. An item of any other type
// ending in "_call" that carries a call_id is an unknown client call.
var table = [...]Item{
	{Typ: "function_call", Input: "arguments", Output: "function_call_output", OutputID: "call_id", Answer: answerText("function_call_output", "call_id")},
	{Typ: "custom_tool_call", Input: "input", Output: "custom_tool_call_output", OutputID: "call_id", FreeText: true, Answer: answerText("custom_tool_call_output", "call_id")},
	{Typ: "local_shell_call", Name: "local_shell", Input: "action", Output: "local_shell_call_output", OutputID: "id", Answer: answerText("local_shell_call_output", "id")},
	{Typ: "shell_call", Name: "shell", Input: "action", Output: "shell_call_output", OutputID: "call_id", Answer: answerShell},
	{Typ: "apply_patch_call", Name: "apply_patch", Input: "operation", Output: "apply_patch_call_output", OutputID: "call_id", Answer: answerPatch},
	{Typ: "computer_call", Name: "computer", Input: "action", Output: "computer_call_output", OutputID: "call_id", Answer: answerComputer},

	{Typ: "mcp_call", Input: "arguments", Hosted: true},
	{Typ: "mcp_approval_request", Input: "arguments", Hosted: true},
	{Typ: "mcp_list_tools", Name: "mcp_list_tools", Input: "server_label", Hosted: true},
	{Typ: "web_search_call", Name: "web_search", Input: "action", Hosted: true},
	{Typ: "file_search_call", Name: "file_search", Input: "queries", Hosted: true},
	{Typ: "code_interpreter_call", Name: "code_interpreter", Input: "code", Hosted: true},
	{Typ: "image_generation_call", Name: "image_generation", Input: "status", Hosted: true},
}

// Lookup returns the table entry for an output item of type typ,
// hasCallID telling whether it carries a call_id. ok is false for an item
// that is no call. An unknown call's entry names it by its type, which
// the entry shares with typ.
func Lookup(typ string, hasCallID bool) (Item, bool) {
	for _, it := range table {
		if it.Typ == typ {
			return it, true
		}
	}
	if hasCallID && strings.HasSuffix(typ, "_call") {
		return Item{
			Typ: typ, Name: typ, Output: typ + "_output", OutputID: "call_id", Unknown: true,
			Answer: answerText(typ+"_output", "call_id"),
		}, true
	}
	return Item{}, false
}

// Of looks up a decoded item.
func Of(item gjson.Result) (Item, bool) {
	return Lookup(item.Get("type").Str, item.Get("call_id").Type == gjson.String)
}

// Output returns the known call type answered by an input item of type
// typ; ok is false when typ answers no call. A type ending in
// "_call_output" answers an unknown call.
func Output(typ string) (Item, bool) {
	for _, it := range table {
		if it.Output != "" && it.Output == typ {
			return it, true
		}
	}
	if strings.HasSuffix(typ, "_call_output") {
		return Item{Output: typ, OutputID: "call_id", Unknown: true}, true
	}
	return Item{}, false
}

// callName is the name gates see for a call whose item's name member is
// raw (a JSON value).
func (it Item) CallName(raw string) string {
	if it.Name != "" {
		return it.Name
	}
	return jsonscan.Text(raw)
}

// inputOf returns a decoded item's input.
func (it Item) InputOf(item gjson.Result) gjson.Result {
	if it.Input == "" {
		return item
	}
	return item.Get(it.Input)
}

// inputRaw returns the raw input of an item's JSON text.
func (it Item) InputRaw(item string) string {
	if it.Input == "" {
		return item
	}
	return jsonscan.MemberRaw(item, it.Input)
}

// answerText answers with the text as the output string.
func answerText(typ, idKey string) func(dst []byte, callID, text string) []byte {
	return func(dst []byte, callID, text string) []byte {
		dst = jsonscan.AppendQuoted(append(dst, `{"type":`...), typ)
		dst = jsonscan.AppendQuoted(append(append(append(dst, `,"`...), idKey...), `":`...), callID)
		dst = jsonscan.AppendQuoted(append(dst, `,"output":`...), text)
		return append(dst, '}')
	}
}

// answerShell answers a shell call as a command that failed with the text
// on its standard error.
func answerShell(dst []byte, callID, text string) []byte {
	dst = jsonscan.AppendQuoted(append(dst, `{"type":"shell_call_output","call_id":`...), callID)
	dst = jsonscan.AppendQuoted(append(dst, `,"output":[{"stdout":"","stderr":`...), text)
	return append(dst, `,"outcome":{"type":"exit","exit_code":1}}]}`...)
}

// answerPatch answers a patch as failed, the text saying why.
func answerPatch(dst []byte, callID, text string) []byte {
	dst = jsonscan.AppendQuoted(append(dst, `{"type":"apply_patch_call_output","call_id":`...), callID)
	dst = jsonscan.AppendQuoted(append(dst, `,"status":"failed","output":`...), text)
	return append(dst, '}')
}

// blankScreenshot is a 1×1 transparent PNG.
const blankScreenshot = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

// answerComputer answers a computer action, whose output can only be a
// screenshot, with a blank one, and the text as a user message after it.
func answerComputer(dst []byte, callID, text string) []byte {
	dst = jsonscan.AppendQuoted(append(dst, `{"type":"computer_call_output","call_id":`...), callID)
	dst = append(dst, `,"output":{"type":"computer_screenshot","image_url":"`+blankScreenshot+`"}},`...)
	dst = jsonscan.AppendQuoted(append(dst, `{"type":"message","role":"user","content":[{"type":"input_text","text":`...), text)
	return append(dst, `}]}`...)
}
