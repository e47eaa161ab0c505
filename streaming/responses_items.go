package streaming

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

// responsesItem describes one output item type that is a call.
type responsesItem struct {
	typ string // the output item type
	// name is the name gates see; "" takes the item's own name member.
	name string
	// input is the member holding what the call does, which gates read as
	// tool.input; "" takes the whole item.
	input string
	// output is the input item type that answers a client call, and
	// outputID the member of it that names the call.
	output, outputID string
	hosted           bool
	// freeText marks an input that is free text rather than JSON.
	freeText bool
	// unknown marks a client call of a type this table does not know: no
	// grant covers it.
	unknown bool
	// answer appends the output item that answers the call with text, when
	// the call is refused (the continuation).
	answer func(dst []byte, callID, text string) []byte
}

// responsesItems are the call item types known. An item of any other type
// ending in "_call" that carries a call_id is an unknown client call.
var responsesItems = [...]responsesItem{
	{typ: "function_call", input: "arguments", output: "function_call_output", outputID: "call_id", answer: answerText("function_call_output", "call_id")},
	{typ: "custom_tool_call", input: "input", output: "custom_tool_call_output", outputID: "call_id", freeText: true, answer: answerText("custom_tool_call_output", "call_id")},
	{typ: "local_shell_call", name: "local_shell", input: "action", output: "local_shell_call_output", outputID: "id", answer: answerText("local_shell_call_output", "id")},
	{typ: "shell_call", name: "shell", input: "action", output: "shell_call_output", outputID: "call_id", answer: answerShell},
	{typ: "apply_patch_call", name: "apply_patch", input: "operation", output: "apply_patch_call_output", outputID: "call_id", answer: answerPatch},
	{typ: "computer_call", name: "computer", input: "action", output: "computer_call_output", outputID: "call_id", answer: answerComputer},

	{typ: "mcp_call", input: "arguments", hosted: true},
	{typ: "mcp_approval_request", input: "arguments", hosted: true},
	{typ: "mcp_list_tools", name: "mcp_list_tools", input: "server_label", hosted: true},
	{typ: "web_search_call", name: "web_search", input: "action", hosted: true},
	{typ: "file_search_call", name: "file_search", input: "queries", hosted: true},
	{typ: "code_interpreter_call", name: "code_interpreter", input: "code", hosted: true},
	{typ: "image_generation_call", name: "image_generation", input: "status", hosted: true},
}

// lookupCallItem returns the table entry for an output item of type typ,
// hasCallID telling whether it carries a call_id. ok is false for an item
// that is no call. An unknown call's entry names it by its type, which
// the entry shares with typ.
func lookupCallItem(typ string, hasCallID bool) (responsesItem, bool) {
	for _, it := range responsesItems {
		if it.typ == typ {
			return it, true
		}
	}
	if hasCallID && strings.HasSuffix(typ, "_call") {
		return responsesItem{
			typ: typ, name: typ, output: typ + "_output", outputID: "call_id", unknown: true,
			answer: answerText(typ+"_output", "call_id"),
		}, true
	}
	return responsesItem{}, false
}

// callItemOf looks up a decoded item.
func callItemOf(item gjson.Result) (responsesItem, bool) {
	return lookupCallItem(item.Get("type").Str, item.Get("call_id").Type == gjson.String)
}

// outputItem returns the known call type answered by an input item of type
// typ; ok is false when typ answers no call. A type ending in
// "_call_output" answers an unknown call.
func outputItem(typ string) (responsesItem, bool) {
	for _, it := range responsesItems {
		if it.output != "" && it.output == typ {
			return it, true
		}
	}
	if strings.HasSuffix(typ, "_call_output") {
		return responsesItem{output: typ, outputID: "call_id", unknown: true}, true
	}
	return responsesItem{}, false
}

// callName is the name gates see for a call whose item's name member is
// raw (a JSON value).
func (it responsesItem) callName(raw string) string {
	if it.name != "" {
		return it.name
	}
	return gjsonText(raw)
}

// inputOf returns a decoded item's input.
func (it responsesItem) inputOf(item gjson.Result) gjson.Result {
	if it.input == "" {
		return item
	}
	return item.Get(it.input)
}

// inputRaw returns the raw input of an item's JSON text.
func (it responsesItem) inputRaw(item string) string {
	if it.input == "" {
		return item
	}
	return jsonscan.MemberRaw(item, it.input)
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
