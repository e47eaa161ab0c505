package streaming

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming/internal/jsonscan"

	"gatekeeper/streaming/internal/callitems"
)

// Continuing a reply whose calls were refused.
//
// A refused call still needs an answer: the model proposed it and waits
// for its result. The continuation answers every client call of the reply
// with a result the proxy chose (a structured refusal for a gated call) and
// asks the model again. Only the conversation's end changes: what comes
// before it is the cached prefix, byte for byte.

// ErrNoToolResult is returned by Continuation when a call of the reply has
// no result and there is no default one.
var ErrNoToolResult = errors.New("streaming: no result for a tool call")

// Continuation returns the request that continues a reply whose client tool
// calls were not run: the original request, plus the reply's assistant
// message exactly as received, plus one tool result per client tool call of
// the reply (results by call id; a call missing from results gets
// results[""]). reply is an SSE stream when streamed, else a JSON body. The
// continuation keeps the original's stream flag and every other field
// untouched.
//
// The results are sent as text (each result's bytes as one JSON string),
// marked is_error for Anthropic. Anthropic: an assistant message with the
// reply's content, then a user message of tool_result blocks. Chat: the
// reply's first choice as an assistant message (role, content, tool_calls
// or a legacy function_call), then a tool (or function) message per call.
// Responses: the reply's output items, then per call the output item that
// answers its type (responses_items.go: a shell call's output is a failed
// command with the result on stderr, a patch's a failed patch, a computer
// action's a blank screenshot followed by a user message with the result);
// an "input" string becomes [{"role":"user","content":<the string>}] first.
func Continuation(d Dialect, request, reply []byte, streamed bool, results map[string][]byte) ([]byte, error) {
	api := d.API()
	switch api {
	case APIAnthropic, APIChat, APIResponses:
	default:
		return nil, fmt.Errorf("%w: %q", ErrUnknownAPI, string(api))
	}
	body := reply
	if streamed {
		var err error
		if body, err = AssembleJSON(api, reply); err != nil {
			return nil, err
		}
	}
	js, err := ReplyObject(api, body)
	if err != nil {
		return nil, err
	}
	res, err := d.DecodeJSON(body)
	if err != nil {
		return nil, err
	}
	if len(res.Errors) > 0 {
		return nil, fmt.Errorf("%w: the reply is an error", ErrInvalidJSON)
	}
	calls := res.ClientToolCalls()
	answers := make([]string, len(calls))
	for i, tc := range calls {
		r, ok := results[tc.ID]
		if !ok {
			r, ok = results[""]
		}
		if !ok {
			return nil, fmt.Errorf("%w: %s %q", ErrNoToolResult, tc.Name, tc.ID)
		}
		answers[i] = string(r)
	}
	reply1 := gjson.Parse(js)
	var items []string
	switch api {
	case APIAnthropic:
		items = anthropicContinuation(reply1, calls, answers)
	case APIChat:
		items = chatContinuation(reply1, calls, answers)
	default:
		items = responsesContinuation(reply1, calls, answers)
	}
	return appendConversation(api, request, []byte(strings.Join(items, ",")))
}

func anthropicContinuation(reply gjson.Result, calls []ToolCall, answers []string) []string {
	content := reply.Get("content").Raw
	if content == "" {
		content = "[]"
	}
	items := []string{`{"role":"assistant","content":` + content + `}`}
	if len(calls) == 0 {
		return items
	}
	var b []byte
	b = append(b, `{"role":"user","content":[`...)
	for i, tc := range calls {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonscan.AppendQuoted(append(b, `{"type":"tool_result","tool_use_id":`...), tc.ID)
		b = jsonscan.AppendQuoted(append(b, `,"content":`...), answers[i])
		b = append(b, `,"is_error":true}`...)
	}
	return append(items, string(append(b, "]}"...)))
}

func chatContinuation(reply gjson.Result, calls []ToolCall, answers []string) []string {
	msg := reply.Get("choices.0.message")
	b := []byte(`{"role":"assistant","content":`)
	if c := msg.Get("content"); c.Exists() {
		b = append(b, c.Raw...)
	} else {
		b = append(b, "null"...)
	}
	if r := msg.Get("refusal"); r.Type == gjson.String {
		b = append(append(b, `,"refusal":`...), r.Raw...)
	}
	if tcs := msg.Get("tool_calls"); tcs.IsArray() && len(tcs.Array()) > 0 {
		b = append(append(b, `,"tool_calls":`...), tcs.Raw...)
	}
	if fc := msg.Get("function_call"); fc.IsObject() {
		b = append(append(b, `,"function_call":`...), fc.Raw...)
	}
	items := []string{string(append(b, '}'))}
	for i, tc := range calls {
		if tc.Choice != 0 {
			continue // only the first choice is continued
		}
		var m []byte
		if tc.Type == "function_call" {
			m = jsonscan.AppendQuoted(append(m, `{"role":"function","name":`...), tc.Name)
		} else {
			m = jsonscan.AppendQuoted(append(m, `{"role":"tool","tool_call_id":`...), tc.ID)
		}
		m = jsonscan.AppendQuoted(append(m, `,"content":`...), answers[i])
		items = append(items, string(append(m, '}')))
	}
	return items
}

func responsesContinuation(reply gjson.Result, calls []ToolCall, answers []string) []string {
	var items []string
	for _, it := range reply.Get("output").Array() {
		items = append(items, it.Raw)
	}
	for i, tc := range calls {
		ci, _ := callitems.Lookup(tc.Type, true)
		if ci.Answer == nil {
			ci, _ = callitems.Lookup("function_call", true)
		}
		items = append(items, string(ci.Answer(nil, tc.ID, answers[i])))
	}
	return items
}
