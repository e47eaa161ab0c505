package chat

import (
	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/request"
)

// Continuation is the request that continues reply, a reply whose client
// calls were not run, with results as their answers (request.Continuation
// does what every API shares): the reply's
// first choice as an assistant message (role, content, tool_calls or a
// legacy function_call), then a tool (or function) message per call.
func (d Dialect) Continuation(req, reply []byte, streamed bool, results map[string][]byte) ([]byte, error) {
	return request.Continuation(d, req, reply, streamed, results, continuation, appendConversation)
}

func continuation(reply gjson.Result, calls []streaming.ToolCall, answers []string) []string {
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
