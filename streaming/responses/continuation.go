package responses

import (
	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/callitems"
	"gatekeeper/streaming/internal/request"
)

// Continuation is the request that continues reply, a reply whose client
// calls were not run, with results as their answers (request.Continuation
// does what every API shares): the reply's
// output items, then per call the output item that answers its type
// (internal/callitems: a shell call's output is a failed command with the
// result on stderr, a patch's a failed patch, a computer action's a blank
// screenshot followed by a user message with the result).
func (d Dialect) Continuation(req, reply []byte, streamed bool, results map[string][]byte) ([]byte, error) {
	return request.Continuation(d, req, reply, streamed, results, continuation, appendConversation)
}

func continuation(reply gjson.Result, calls []streaming.ToolCall, answers []string) []string {
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
