package responses_test

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/internal/streamtest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/responses"
	"gatekeeper/streaming/sse"
)

func TestResponsesStreams(t *testing.T) {
	weather := `{"location":"Boston, MA","unit":"celsius"}`
	tests := []streamtest.StreamCase{
		{
			File: "function-call-sequence-number.sse",
			Want: streamtest.Golden{
				ID: "resp_FC1", Model: "gpt-4.1-2025-04-14",
				Stops: []streaming.Stop{{Reason: streaming.StopToolUse, Raw: "response.completed"}},
				Calls: []streamtest.GoldenCall{
					{Type: "function_call", ID: "call_001", ItemID: "fc_001", Name: "get_current_weather", Args: weather, Complete: true},
				},
				Usage: &streaming.Usage{InputTokens: 75, OutputTokens: 23},
				Done:  true,
			},
		},
		{
			File: "function-call-no-sequence-done-without-name.sse",
			Want: streamtest.Golden{
				ID: "resp_FC0", Model: "gpt-4.1-2025-04-14",
				Stops: []streaming.Stop{{Reason: streaming.StopToolUse, Raw: "response.completed"}},
				Calls: []streamtest.GoldenCall{
					{Type: "function_call", ID: "call_001", ItemID: "fc_001", Name: "get_current_weather", Args: weather, Complete: true},
				},
				Usage: &streaming.Usage{InputTokens: 75, OutputTokens: 23},
				Done:  true,
			},
		},
		{
			File: "custom-tool-call.sse",
			Want: streamtest.Golden{
				ID: "resp_CT1", Model: "gpt-5-2025-08-07",
				Stops: []streaming.Stop{{Reason: streaming.StopToolUse, Raw: "response.completed"}},
				Calls: []streamtest.GoldenCall{{
					Type: "custom_tool_call", ID: "call_ct1", ItemID: "ctc_001", Name: "apply_patch", Complete: true,
					Args: "*** Begin Patch\n*** Update File: a.go\n@@\n-x\n+y\n*** End Patch",
				}},
				Usage: &streaming.Usage{InputTokens: 300, OutputTokens: 60, ReasoningTokens: 40},
				Done:  true,
			},
		},
		{
			File: "reasoning-then-function-call.sse",
			Want: streamtest.Golden{
				ID: "resp_RS1", Model: "gpt-5-mini-2025-08-07",
				Stops: []streaming.Stop{{Reason: streaming.StopToolUse, Raw: "response.completed"}},
				Calls: []streamtest.GoldenCall{
					{Index: 1, Type: "function_call", ID: "call_101", ItemID: "fc_101", Name: "calculator", Args: `{"a":12,"b":7,"op":"add"}`, Complete: true},
				},
				Usage:    &streaming.Usage{InputTokens: 134, OutputTokens: 28, ReasoningTokens: 12},
				Done:     true,
				Thinking: "**Adding**\n\nI will add 12 and 7.",
			},
		},
		{
			File: "incomplete-max-output-tokens.sse",
			Want: streamtest.Golden{
				ID: "resp_IN1", Model: "gpt-4o-2024-08-06",
				Stops: []streaming.Stop{{Reason: streaming.StopMaxTokens, Raw: "response.incomplete:max_output_tokens"}},
				Usage: &streaming.Usage{}, // reported, all zero
				Done:  true, Text: "In the bustling city",
			},
		},
		{
			File: "incomplete-content-filter-refusal.sse",
			Want: streamtest.Golden{
				ID: "resp_CF1", Model: "gpt-4.1-2025-04-14",
				Stops:   []streaming.Stop{{Reason: streaming.StopContentFilter, Raw: "response.incomplete:content_filter"}},
				Usage:   &streaming.Usage{InputTokens: 50, OutputTokens: 9},
				Done:    true,
				Refusal: "I can't help with that.",
			},
		},
		{
			File: "error-then-failed.sse",
			Want: streamtest.Golden{
				ID: "resp_ER1", Model: "gpt-5-nano-2025-08-07",
				Stops:  []streaming.Stop{{Reason: streaming.StopError, Raw: "response.failed"}},
				Errors: []string{"insufficient_quota: You exceeded your current quota."}, // once, not again for response.failed
				Done:   true,
			},
		},
		{
			File: "failed-server-error.sse",
			Want: streamtest.Golden{
				ID: "resp_FA1", Model: "gpt-4.1-2025-04-14",
				Stops:  []streaming.Stop{{Reason: streaming.StopError, Raw: "response.failed"}},
				Errors: []string{"server_error: The server had an error."},
				Usage:  &streaming.Usage{InputTokens: 20, OutputTokens: 1},
				Done:   true, Text: "Partial",
			},
		},
		{
			File: "flat-error.sse",
			Want: streamtest.Golden{
				ID: "resp_FL1", Model: "gpt-4.1-2025-04-14",
				Stops:  []streaming.Stop{{Reason: streaming.StopError, Raw: "error"}},
				Errors: []string{"rate_limit_exceeded: Rate limit reached."},
			},
		},
		{
			File: "cached-tokens.sse",
			Want: streamtest.Golden{
				ID: "resp_CA1", Model: "gpt-4o-2024-08-06",
				Stops: []streaming.Stop{{Reason: streaming.StopEndTurn, Raw: "response.completed"}},
				Usage: &streaming.Usage{InputTokens: 100, CachedInputTokens: 1390, CacheWriteTokens: 25, OutputTokens: 8},
				Done:  true, Text: "Cached answer.",
			},
		},
		{
			File: "parallel-calls-item-done.sse",
			Want: streamtest.Golden{
				ID: "resp_PD1", Model: "gpt-4.1-2025-04-14",
				Stops: []streaming.Stop{{Reason: streaming.StopToolUse, Raw: "response.completed"}},
				Calls: []streamtest.GoldenCall{
					{Index: 0, Type: "function_call", ID: "call_201", ItemID: "fc_201", Name: "read", Args: `{"path":"a.txt"}`, Complete: true},
					{Index: 1, Type: "function_call", ID: "call_202", ItemID: "fc_202", Name: "list", Args: `{"dir":"."}`, Complete: true},
				},
				Usage: &streaming.Usage{InputTokens: 90, OutputTokens: 30},
				Done:  true,
			},
		},
		{
			File: "mcp-call-server.sse",
			Want: streamtest.Golden{
				ID: "resp_MC1", Model: "gpt-4.1-2025-04-14",
				Stops: []streaming.Stop{{Reason: streaming.StopEndTurn, Raw: "response.completed"}},
				Calls: []streamtest.GoldenCall{
					{Type: "mcp_call", ItemID: "mcp_001", Name: "search", Args: `{"q":"sse"}`, Complete: true, Server: true},
				},
				Usage: &streaming.Usage{InputTokens: 400, OutputTokens: 20},
				Done:  true, Text: "Found 3.",
			},
		},
		{
			File: "truncated-no-terminal.sse",
			Want: streamtest.Golden{
				ID: "resp_TR1", Model: "gpt-4.1-2025-04-14",
				Calls: []streamtest.GoldenCall{
					{Type: "function_call", ID: "call_301", ItemID: "fc_301", Name: "write_file", Args: `{"path":"b.txt","body":"`},
				},
				Truncated: true,
			},
		},
		{
			File: "no-event-lines.sse",
			Want: streamtest.Golden{
				ID: "resp_NE1", Model: "local-model",
				Stops: []streaming.Stop{{Reason: streaming.StopEndTurn, Raw: "response.completed"}},
				Usage: &streaming.Usage{InputTokens: 5, OutputTokens: 1},
				Done:  true, Text: "Hi",
			},
		},
	}
	streamtest.CheckStreams(t, responses.Dialect{}, streamtest.ResponsesSays, testdata, append(tests, streamtest.StreamCase{File: "client-call-items.sse", Want: clientCallItemsGolden}))
}

// clientCallItemsGolden is what client-call-items.sse and its whole body
// decode to: a call per client call item, under the name gates see with
// its action or operation as input; the web search recorded as a server
// call; the unknown foo_call with a call_id a client call whose input is
// the whole item; bar_call, without a call_id, no call.
var clientCallItemsGolden = streamtest.Golden{
	ID: "resp_CI1", Model: "gpt-5-codex",
	Stops: []streaming.Stop{{Reason: streaming.StopToolUse, Raw: "response.completed"}},
	Calls: []streamtest.GoldenCall{
		{Index: 0, Type: "local_shell_call", ID: "call_ls1", ItemID: "lsh_001", Name: "local_shell", Complete: true,
			Args: `{"type":"exec","command":["ls","-la"],"env":{},"working_directory":"/work"}`},
		{Index: 1, Type: "shell_call", ID: "call_sh1", ItemID: "sh_002", Name: "shell", Complete: true,
			Args: `{"commands":["rm -rf build"],"timeout_ms":60000,"max_output_length":4096}`},
		{Index: 2, Type: "apply_patch_call", ID: "call_ap1", ItemID: "apc_003", Name: "apply_patch", Complete: true,
			Args: `{"type":"update_file","path":"a.go","diff":"@@\n-x\n+y\n"}`},
		{Index: 3, Type: "computer_call", ID: "call_cu1", ItemID: "cu_004", Name: "computer", Complete: true,
			Args: `{"type":"click","button":"left","x":10,"y":20}`},
		{Index: 4, Type: "web_search_call", ItemID: "ws_005", Name: "web_search", Complete: true, Server: true,
			Args: `{"type":"search","query":"weather"}`},
		{Index: 5, Type: "foo_call", ID: "call_foo1", ItemID: "foo_006", Name: "foo_call", Complete: true,
			Args: `{"id":"foo_006","type":"foo_call","status":"completed","call_id":"call_foo1","action":{"verb":"frob"}}`},
	},
	Usage: &streaming.Usage{InputTokens: 120, OutputTokens: 80},
	Done:  true,
}

func TestResponsesDecodeEdgeCases(t *testing.T) {
	ev := func(name, data string) sse.Event {
		return sse.Event{Name: []byte(name), HasData: true, Data: []byte(data)}
	}
	tests := []struct {
		name   string
		events []sse.Event
		check  func(t *testing.T, res *streaming.Result)
	}{
		{
			name: "the JSON type wins over the event name",
			events: []sse.Event{
				ev("message", `{"type":"response.created","response":{"id":"r1","model":"m"}}`),
				ev("response.output_text.delta", `{"type":"response.completed","response":{"id":"r1","status":"completed","output":[]}}`),
			},
			check: func(t *testing.T, res *streaming.Result) {
				if !res.Done || res.MessageID != "r1" || res.OutputBytes != 0 {
					t.Errorf("got %+v", res)
				}
			},
		},
		{
			name: "the event name is the fallback when the JSON has no type",
			events: []sse.Event{
				ev("response.output_text.delta", `{"delta":"abc"}`),
			},
			check: func(t *testing.T, res *streaming.Result) {
				if res.OutputBytes != 3 {
					t.Errorf("OutputBytes = %d", res.OutputBytes)
				}
			},
		},
		{
			name: "deltas matched by output_index when item_id is missing",
			events: []sse.Event{
				ev("", `{"type":"response.output_item.added","output_index":3,"item":{"type":"function_call","id":"fc_9","call_id":"call_9","name":"f","arguments":""}}`),
				ev("", `{"type":"response.function_call_arguments.delta","output_index":3,"delta":"{}"}`),
			},
			check: func(t *testing.T, res *streaming.Result) {
				if len(res.ToolCalls) != 1 || string(res.ToolCalls[0].Arguments) != "{}" || res.ToolCalls[0].Complete {
					t.Errorf("ToolCalls = %+v", res.ToolCalls)
				}
			},
		},
		{
			name: ".done arguments replace the deltas",
			events: []sse.Event{
				ev("", `{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"c","name":"f","arguments":""}}`),
				ev("", `{"type":"response.function_call_arguments.delta","item_id":"fc_1","delta":"{\"a\":"}`),
				ev("", `{"type":"response.function_call_arguments.done","item_id":"fc_1","arguments":"{\"a\":2}"}`),
				ev("", `{"type":"response.output_item.done","output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"c","name":"f","arguments":"{\"a\":3}","status":"completed"}}`),
			},
			check: func(t *testing.T, res *streaming.Result) {
				if string(res.ToolCalls[0].Arguments) != `{"a":2}` || !res.ToolCalls[0].Complete {
					t.Errorf("ToolCalls = %+v", res.ToolCalls)
				}
			},
		},
		{
			name: "a call only in the completed output is recorded",
			events: []sse.Event{
				ev("", `{"type":"response.completed","response":{"id":"r","status":"completed","output":[{"type":"message","content":[]},{"type":"function_call","id":"fc_2","call_id":"call_2","name":"g","arguments":"{}","status":"completed"}]}}`),
			},
			check: func(t *testing.T, res *streaming.Result) {
				want := streaming.ToolCall{Index: 1, Type: "function_call", ID: "call_2", ItemID: "fc_2", Name: "g", Arguments: []byte("{}"), Complete: true}
				if len(res.ToolCalls) != 1 || !reflect.DeepEqual(res.ToolCalls[0], want) || res.StopReason() != streaming.StopToolUse {
					t.Errorf("ToolCalls = %+v, stop %q", res.ToolCalls, res.StopReason())
				}
			},
		},
		{
			name: "only the first terminal event counts",
			events: []sse.Event{
				ev("", `{"type":"response.completed","response":{"id":"r","status":"completed"}}`),
				ev("", `{"type":"response.failed","response":{"id":"r","status":"failed","error":{"code":"x","message":"y"}}}`),
			},
			check: func(t *testing.T, res *streaming.Result) {
				if len(res.Stops) != 1 || len(res.Errors) != 0 {
					t.Errorf("Stops = %+v, Errors = %+v", res.Stops, res.Errors)
				}
			},
		},
		{
			name: "a failed response with a new code reports it after an error event",
			events: []sse.Event{
				ev("error", `{"type":"error","error":{"type":"server_error","code":"a","message":"first"}}`),
				ev("", `{"type":"response.failed","response":{"id":"r","status":"failed","error":{"code":"b","message":"second"}}}`),
			},
			check: func(t *testing.T, res *streaming.Result) {
				if len(res.Errors) != 2 || res.Errors[1].Type != "b" || res.Truncated {
					t.Errorf("Errors = %+v", res.Errors)
				}
			},
		},
		{
			name:   "error event with plain-text data is still the error",
			events: []sse.Event{ev("error", `Internal Server Error`)},
			check: func(t *testing.T, res *streaming.Result) {
				if len(res.Errors) != 1 || res.Errors[0].Message != "Internal Server Error" || res.Unparsed != 0 || res.Truncated {
					t.Errorf("got %+v", res)
				}
			},
		},
		{
			name:   "invalid JSON is counted",
			events: []sse.Event{ev("response.output_text.delta", `{"type":"response.output_text.delta","delta":"x`)},
			check: func(t *testing.T, res *streaming.Result) {
				if res.Unparsed != 1 || !errors.Is(res.UnparsedErrors[0], streaming.ErrInvalidJSON) || !res.Truncated {
					t.Errorf("got %+v", res)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := responses.Dialect{}.NewDecoder()
			for i := range tt.events {
				d.Decode(&tt.events[i])
			}
			tt.check(t, d.Finish())
		})
	}
}

var jsonCases = []streamtest.JSONCase{
	{
		Name: "client call items",
		Body: `{"id":"resp_CI1","object":"response","created_at":1760000000,"status":"completed","error":null,"incomplete_details":null,"model":"gpt-5-codex","output":[{"id":"lsh_001","type":"local_shell_call","status":"completed","call_id":"call_ls1","action":{"type":"exec","command":["ls","-la"],"env":{},"working_directory":"/work"}},{"id":"sh_002","type":"shell_call","status":"completed","call_id":"call_sh1","action":{"commands":["rm -rf build"],"timeout_ms":60000,"max_output_length":4096}},{"id":"apc_003","type":"apply_patch_call","status":"completed","call_id":"call_ap1","operation":{"type":"update_file","path":"a.go","diff":"@@\n-x\n+y\n"}},{"id":"cu_004","type":"computer_call","status":"completed","call_id":"call_cu1","action":{"type":"click","button":"left","x":10,"y":20},"pending_safety_checks":[]},{"id":"ws_005","type":"web_search_call","status":"completed","action":{"type":"search","query":"weather"}},{"id":"foo_006","type":"foo_call","status":"completed","call_id":"call_foo1","action":{"verb":"frob"}},{"id":"bar_007","type":"bar_call","status":"completed","detail":"no call id"}],"usage":{"input_tokens":120,"input_tokens_details":{"cached_tokens":0},"output_tokens":80,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":200}}`,
		Want: clientCallItemsGolden,
	},
	{
		Name: "function call",
		Body: `{"id":"resp_J1","object":"response","status":"completed","error":null,"incomplete_details":null,"model":"gpt-4.1","output":[{"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Oslo\"}","status":"completed"}],"usage":{"input_tokens":50,"input_tokens_details":{"cached_tokens":10},"output_tokens":12,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":62}}`,
		Want: streamtest.Golden{
			ID: "resp_J1", Model: "gpt-4.1", Stops: []streaming.Stop{{Reason: streaming.StopToolUse, Raw: "response.completed"}},
			Calls: []streamtest.GoldenCall{
				{Type: "function_call", ID: "call_1", ItemID: "fc_1", Name: "get_weather", Args: `{"city":"Oslo"}`, Complete: true},
			},
			Usage: &streaming.Usage{InputTokens: 40, CachedInputTokens: 10, OutputTokens: 12}, Done: true,
		},
	},
	{
		Name: "text after reasoning",
		Body: `{"id":"resp_J2","object":"response","status":"completed","model":"o4-mini","output":[{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"think"}]},{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[]}]}],"usage":{"input_tokens":9,"output_tokens":40,"output_tokens_details":{"reasoning_tokens":32}}}`,
		Want: streamtest.Golden{
			ID: "resp_J2", Model: "o4-mini", Stops: []streaming.Stop{{Reason: streaming.StopEndTurn, Raw: "response.completed"}},
			Usage: &streaming.Usage{InputTokens: 9, OutputTokens: 40, ReasoningTokens: 32}, Done: true,
		},
	},
	{
		Name: "incomplete for max_output_tokens",
		Body: `{"id":"resp_J3","object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"model":"gpt-4o","output":[{"type":"message","id":"msg_2","status":"incomplete","content":[{"type":"output_text","text":"Once"}]}],"usage":{"input_tokens":5,"output_tokens":16}}`,
		Want: streamtest.Golden{
			ID: "resp_J3", Model: "gpt-4o", Stops: []streaming.Stop{{Reason: streaming.StopMaxTokens, Raw: "response.incomplete:max_output_tokens"}},
			Usage: &streaming.Usage{InputTokens: 5, OutputTokens: 16}, Done: true,
		},
	},
	{
		Name: "failed response",
		Body: `{"id":"resp_J4","object":"response","status":"failed","error":{"code":"server_error","message":"oops"},"model":"gpt-4o","output":[],"usage":null}`,
		Want: streamtest.Golden{
			ID: "resp_J4", Model: "gpt-4o", Stops: []streaming.Stop{{Reason: streaming.StopError, Raw: "response.failed"}},
			Errors: []string{"server_error: oops"}, Done: true,
		},
	},
	{
		Name: "custom tool call and cancelled status",
		Body: `{"id":"resp_J5","object":"response","status":"cancelled","model":"gpt-5","output":[{"type":"custom_tool_call","id":"ctc_1","call_id":"call_c","name":"shell","input":"ls -la","status":"completed"}]}`,
		Want: streamtest.Golden{
			ID: "resp_J5", Model: "gpt-5", Stops: []streaming.Stop{{Reason: "cancelled", Raw: "response.cancelled"}},
			Calls: []streamtest.GoldenCall{
				{Type: "custom_tool_call", ID: "call_c", ItemID: "ctc_1", Name: "shell", Args: "ls -la", Complete: true},
			},
			Done: true,
		},
	},
	{
		Name: "queued background response",
		Body: `{"id":"resp_J6","object":"response","status":"queued","model":"o3","output":[],"usage":null}`,
		Want: streamtest.Golden{ID: "resp_J6", Model: "o3", Done: true},
	},
	{
		Name: "error body",
		Body: `{"error":{"message":"The model does not exist.","type":"invalid_request_error","param":"model","code":"model_not_found"}}`,
		Want: streamtest.Golden{
			Stops:  []streaming.Stop{{Reason: streaming.StopError, Raw: "error"}},
			Errors: []string{"invalid_request_error: The model does not exist."}, Done: true,
		},
	},
	{Name: "invalid JSON", Body: `{"id":"resp_x","output":[`, Err: true},
	{Name: "not an object", Body: `null`, Err: true},
}

func TestDecodeResponsesJSON(t *testing.T) {
	streamtest.CheckJSONCases(t, responses.Dialect{}, jsonCases)
}

// TestResponsesJSONMatchesStream: the final Response of a stream, decoded
// as a body, gives the stream's Result.
func TestResponsesJSONMatchesStream(t *testing.T) {
	for _, file := range []string{"function-call-sequence-number.sse", "custom-tool-call.sse", "cached-tokens.sse"} {
		t.Run(file, func(t *testing.T) {
			path := filepath.Join(testdata, file)
			fromStream := streamtest.MustDecode(t, responses.Dialect{}, fixturetest.ReadFile(t, path))
			final := finalResponse(t, path)
			fromBody, err := responses.Dialect{}.DecodeJSON(final)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(fromBody, fromStream) {
				t.Errorf("body   %+v\nstream %+v", fromBody, fromStream)
			}
		})
	}
}

// finalResponse returns the Response object of a stream's terminal
// event.
func finalResponse(t *testing.T, path string) []byte {
	t.Helper()
	var final []byte
	err := sse.Each(fixturetest.ReadFile(t, path), func(ev *sse.Event) error {
		if r := gjson.GetBytes(ev.Data, "response"); r.Get("status").Str == "completed" {
			final = []byte(r.Raw)
		}
		return nil
	})
	if err != nil || final == nil {
		t.Fatalf("no completed response in %s: %v", path, err)
	}
	return final
}
