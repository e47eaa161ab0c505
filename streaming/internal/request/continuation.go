package request

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/reshape"
)

// Continuing a reply whose calls were refused.
//
// A refused call still needs an answer: the model proposed it and waits
// for its result. The continuation answers every client call of the reply
// with a result the proxy chose (a structured refusal for a gated call) and
// asks the model again. Only the conversation's end changes: what comes
// before it is the cached prefix, byte for byte.

// ContinuationItems are the conversation items a dialect appends to a
// request to continue reply: the reply's own output as a request carries
// it, then an item answering each client call in calls with its text in
// answers.
type ContinuationItems func(reply gjson.Result, calls []streaming.ToolCall, answers []string) []string

// Continuation returns the request that continues a reply whose client tool
// calls were not run: the original request, plus the reply's assistant
// message exactly as received, plus one tool result per client tool call of
// the reply (results by call id; a call missing from results gets
// results[""]). reply is an SSE stream when streamed, else a JSON body. The
// continuation keeps the original's stream flag and every other field
// untouched.
//
// The results are sent as text (each result's bytes as one JSON string);
// answer, the dialect's, writes the reply's output and the answers as the
// API's conversation items, and appendItems, the dialect's too, appends
// them to the request's conversation.
func Continuation(d streaming.Dialect, request, reply []byte, streamed bool, results map[string][]byte,
	answer ContinuationItems, appendItems func(body, items []byte) ([]byte, error)) ([]byte, error) {
	api := d.API()
	body := reply
	if streamed {
		var err error
		if body, err = d.AssembleJSON(reply); err != nil {
			return nil, err
		}
	}
	js, err := reshape.ReplyObject(api, body)
	if err != nil {
		return nil, err
	}
	res, err := d.DecodeJSON(body)
	if err != nil {
		return nil, err
	}
	if len(res.Errors) > 0 {
		return nil, fmt.Errorf("%w: the reply is an error", streaming.ErrInvalidJSON)
	}
	calls := res.ClientToolCalls()
	answers := make([]string, len(calls))
	for i, tc := range calls {
		r, ok := results[tc.ID]
		if !ok {
			r, ok = results[""]
		}
		if !ok {
			return nil, fmt.Errorf("%w: %s %q", streaming.ErrNoToolResult, tc.Name, tc.ID)
		}
		answers[i] = string(r)
	}
	items := answer(gjson.Parse(js), calls, answers)
	return appendItems(request, []byte(strings.Join(items, ",")))
}
