package anthropic

import (
	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/request"
)

// Continuation is the request that continues reply, a reply whose client
// calls were not run, with results as their answers (request.Continuation
// does what every API shares): the reply's
// content as an assistant message, then one user message of tool_result
// blocks (is_error set).
func (d Dialect) Continuation(req, reply []byte, streamed bool, results map[string][]byte) ([]byte, error) {
	return request.Continuation(d, req, reply, streamed, results, continuation, appendConversation)
}

func continuation(reply gjson.Result, calls []streaming.ToolCall, answers []string) []string {
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
