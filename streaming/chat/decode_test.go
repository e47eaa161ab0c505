package chat_test

import (
	"errors"
	"reflect"
	"testing"

	"gatekeeper/internal/streamtest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/chat"
	"gatekeeper/streaming/sse"
)

func TestChatStreams(t *testing.T) {
	tests := []streamtest.StreamCase{
		{
			File: "parallel-tool-calls.sse",
			Want: streamtest.Golden{
				ID: "chatcmpl-T1", Model: "gpt-4o-2024-08-06",
				Stops: []streaming.Stop{{Choice: 0, Reason: streaming.StopToolUse, Raw: "tool_calls"}},
				Calls: []streamtest.GoldenCall{
					{Index: 0, Type: "function", ID: "call_A1", Name: "get_weather", Args: `{"city": "Oslo"}`, Complete: true},
					{Index: 1, Type: "function", ID: "call_B2", Name: "get_time", Args: `{"tz": "Europe/Oslo"}`, Complete: true},
				},
				Usage: &streaming.Usage{InputTokens: 120, OutputTokens: 40},
				Done:  true,
			},
		},
		{
			File: "n2-interleaved-tool-calls.sse",
			Want: streamtest.Golden{
				ID: "chatcmpl-N2", Model: "gpt-3.5-turbo-0125",
				Stops: []streaming.Stop{{Choice: 0, Reason: streaming.StopToolUse, Raw: "tool_calls"}, {Choice: 1, Reason: streaming.StopToolUse, Raw: "tool_calls"}},
				Calls: []streamtest.GoldenCall{
					{Choice: 0, Index: 0, Type: "function", ID: "call_C0", Name: "lookup", Args: `{"q":"a"}`, Complete: true},
					{Choice: 1, Index: 0, Type: "function", ID: "call_C1", Name: "lookup", Args: `{"q":"b","n":2}`, Complete: true},
				},
				Usage: &streaming.Usage{InputTokens: 85, OutputTokens: 43},
				Done:  true,
			},
		},
		{
			File: "anthropic-compat-index-1.sse",
			Want: streamtest.Golden{
				ID: "msg_compat1", Model: "claude-haiku-4-5",
				Stops: []streaming.Stop{{Reason: streaming.StopToolUse, Raw: "tool_calls"}},
				Calls: []streamtest.GoldenCall{
					{Index: 1, Type: "function", ID: "toolu_01X", Name: "read_file", Args: `{"path": "notes.md"}`, Complete: true},
				},
				Done: true, Text: "Let me look.",
			},
		},
		{
			File: "refusal.sse",
			Want: streamtest.Golden{
				ID: "chatcmpl-T1", Model: "gpt-4o-2024-08-06",
				Stops:   []streaming.Stop{{Reason: streaming.StopEndTurn, Raw: "stop"}},
				Usage:   &streaming.Usage{InputTokens: 79, OutputTokens: 11},
				Done:    true,
				Refusal: "I'm sorry, I can't help with that.",
			},
		},
		{
			File: "length-cached-tokens.sse",
			Want: streamtest.Golden{
				ID: "chatcmpl-T1", Model: "gpt-4o-2024-08-06",
				Stops: []streaming.Stop{{Reason: streaming.StopMaxTokens, Raw: "length"}},
				Usage: &streaming.Usage{InputTokens: 40, CachedInputTokens: 1280, CacheWriteTokens: 100, OutputTokens: 100},
				Done:  true, Text: "Once upon a time",
			},
		},
		{
			File: "deepseek-usage-on-finish.sse",
			Want: streamtest.Golden{
				ID: "5f0c1a2b-ds", Model: "deepseek-reasoner",
				Stops: []streaming.Stop{{Reason: streaming.StopEndTurn, Raw: "stop"}},
				Usage: &streaming.Usage{InputTokens: 6, CachedInputTokens: 24, OutputTokens: 12, ReasoningTokens: 8},
				Done:  true, Text: "4", Thinking: "Add the numbers.",
			},
		},
		{
			File: "azure-empty-first-chunk.sse",
			Want: streamtest.Golden{
				ID: "chatcmpl-AZ1", Model: "gpt-5-nano-2025-08-07",
				Stops: []streaming.Stop{{Reason: streaming.StopEndTurn, Raw: "stop"}},
				Usage: &streaming.Usage{InputTokens: 15, OutputTokens: 78, ReasoningTokens: 64},
				Done:  true, Text: "Copenhagen.",
			},
		},
		{
			File: "xai-reasoning-outside-completion.sse",
			Want: streamtest.Golden{
				ID: "a1b2-xai", Model: "grok-3-mini",
				Stops: []streaming.Stop{{Reason: streaming.StopToolUse, Raw: "tool_calls"}},
				Calls: []streamtest.GoldenCall{
					{Index: 0, Type: "function", ID: "call_x1", Name: "weather", Args: `{"location":"Lisbon"}`, Complete: true},
				},
				// 307+26+227 == 560: reasoning is outside completion_tokens.
				Usage: &streaming.Usage{InputTokens: 1, CachedInputTokens: 306, OutputTokens: 253, ReasoningTokens: 227},
				Done:  true, Thinking: "The user wants weather.",
			},
		},
		{
			File: "groq-error-event.sse",
			Want: streamtest.Golden{
				ID: "chatcmpl-gq1", Model: "openai/gpt-oss-120b",
				Stops:    []streaming.Stop{{Reason: streaming.StopError, Raw: "error"}},
				Errors:   []string{"invalid_request_error: Tool call validation failed: missing properties: name"},
				Thinking: "Call the tool.",
			},
		},
		{
			File: "groq-whole-call-usage-on-finish.sse",
			Want: streamtest.Golden{
				ID: "chatcmpl-gq1", Model: "openai/gpt-oss-120b",
				Stops: []streaming.Stop{{Reason: streaming.StopToolUse, Raw: "tool_calls"}},
				Calls: []streamtest.GoldenCall{
					{Index: 0, Type: "function", ID: "call_g1", Name: "search", Args: `{"query":"go generics"}`, Complete: true},
				},
				Usage: &streaming.Usage{InputTokens: 210, OutputTokens: 22},
				Done:  true,
			},
		},
		{
			File: "openrouter-comments-inline-error.sse",
			Want: streamtest.Golden{
				ID: "gen-1762-OR", Model: "minimax/minimax-m2:free",
				Stops:    []streaming.Stop{{Reason: streaming.StopMaxTokens, Raw: "length"}}, // once, though sent twice
				Usage:    &streaming.Usage{InputTokens: 43, OutputTokens: 10, ReasoningTokens: 11},
				Errors:   []string{"400: Token limit reached"},
				Done:     true,
				Thinking: "We need to answer.",
			},
		},
		{
			File: "truncated-mid-tool-call.sse",
			Want: streamtest.Golden{
				ID: "chatcmpl-T1", Model: "gpt-4o-2024-08-06",
				Calls: []streamtest.GoldenCall{
					{Index: 0, Type: "function", ID: "call_T1", Name: "write_file", Args: `{"path":"a.txt","con`},
				},
				Truncated: true,
			},
		},
		{
			File: "truncated-mid-event.sse",
			Want: streamtest.Golden{
				ID: "chatcmpl-T1", Model: "gpt-4o-2024-08-06",
				Truncated: true, Unparsed: 1, Text: "Hello",
			},
		},
		{
			File: "legacy-function-call.sse",
			Want: streamtest.Golden{
				ID: "chatcmpl-T1", Model: "gpt-3.5-turbo-0613",
				Stops: []streaming.Stop{{Reason: streaming.StopToolUse, Raw: "function_call"}},
				Calls: []streamtest.GoldenCall{
					{Index: 0, Type: "function_call", Name: "get_price", Args: `{"sku":"A-1"}`, Complete: true},
				},
				Done: true,
			},
		},
		{
			File: "content-filter-and-unknown-reason.sse",
			Want: streamtest.Golden{
				ID: "chatcmpl-T1", Model: "gpt-4o-2024-08-06",
				Stops: []streaming.Stop{{Choice: 0, Reason: streaming.StopContentFilter, Raw: "content_filter"}, {Choice: 1, Reason: "eos_token", Raw: "eos_token"}},
				Done:  true, Text: "SureNo",
			},
		},
		{
			File: "invalid-chunk-counted.sse",
			Want: streamtest.Golden{
				ID: "chatcmpl-T1", Model: "gpt-4o-2024-08-06",
				Stops: []streaming.Stop{{Reason: streaming.StopEndTurn, Raw: "stop"}},
				Done:  true, Unparsed: 1, Text: "AC",
			},
		},
		{
			File: "no-index-tool-calls-crlf.sse",
			Want: streamtest.Golden{
				ID: "chatcmpl-T1", Model: "gemini-2.5-flash",
				Stops: []streaming.Stop{{Reason: streaming.StopToolUse, Raw: "tool_calls"}},
				Calls: []streamtest.GoldenCall{
					{Index: 0, Type: "function", ID: "call_n1", Name: "a", Args: `{"x":1}`, Complete: true},
					{Index: 1, Type: "function", ID: "call_n2", Name: "b", Args: `{}`, Complete: true},
				},
				Done: true,
			},
		},
	}
	streamtest.CheckStreams(t, chat.Dialect{}, streamtest.ChatSays, testdata, tests)
}

func TestChatDecodeEdgeCases(t *testing.T) {
	tests := []struct {
		name   string
		events []sse.Event
		check  func(t *testing.T, res *streaming.Result)
	}{
		{
			name:   "events without data are ignored",
			events: []sse.Event{{Comments: 1}, {Name: []byte("ping")}},
			check: func(t *testing.T, res *streaming.Result) {
				if res.Unparsed != 0 || res.MessageID != "" || !res.Truncated {
					t.Errorf("got %+v", res)
				}
			},
		},
		{
			name:   "a non-object chunk is unparsed",
			events: []sse.Event{{HasData: true, Data: []byte(`[1,2]`)}, {HasData: true, Data: []byte(`"x"`)}},
			check: func(t *testing.T, res *streaming.Result) {
				if res.Unparsed != 2 || !errors.Is(res.UnparsedErrors[0], streaming.ErrInvalidJSON) {
					t.Errorf("Unparsed = %d, %v", res.Unparsed, res.UnparsedErrors)
				}
			},
		},
		{
			name: "an error before choice 0 finished wins the stop",
			events: []sse.Event{
				{HasData: true, Data: []byte(`{"id":"c1","choices":[{"index":0,"delta":{"content":"x"}}]}`)},
				{HasData: true, Data: []byte(`{"error":{"code":"server_error","message":"boom"}}`)},
				{HasData: true, Data: []byte(`{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)},
				{HasData: true, Data: []byte(`[DONE]`)},
			},
			check: func(t *testing.T, res *streaming.Result) {
				want := []streaming.Stop{{Reason: streaming.StopError, Raw: "error"}}
				if !reflect.DeepEqual(res.Stops, want) || res.Errors[0].Type != "server_error" || res.Truncated {
					t.Errorf("Stops = %+v, Errors = %+v", res.Stops, res.Errors)
				}
			},
		},
		{
			name: "event error whose data is the bare error object",
			events: []sse.Event{
				{Name: []byte("error"), HasData: true, Data: []byte(`{"message":"overloaded","type":"server_error"}`)},
			},
			check: func(t *testing.T, res *streaming.Result) {
				if len(res.Errors) != 1 || res.Errors[0].Message != "overloaded" || res.Truncated {
					t.Errorf("Errors = %+v, Truncated = %v", res.Errors, res.Truncated)
				}
			},
		},
		{
			name: "event error with plain-text data is still the error",
			events: []sse.Event{
				{Name: []byte("error"), HasData: true, Data: []byte(`upstream connect error`)},
			},
			check: func(t *testing.T, res *streaming.Result) {
				if len(res.Errors) != 1 || res.Errors[0].Message != "upstream connect error" || res.Unparsed != 0 ||
					res.Truncated || res.StopReason() != streaming.StopError {
					t.Errorf("got %+v", res)
				}
			},
		},
		{
			name: "a fragment with neither index nor id continues the choice's last call",
			events: []sse.Event{
				{HasData: true, Data: []byte(`{"choices":[{"delta":{"tool_calls":[{"index":4,"id":"k","function":{"name":"f","arguments":"{\"a\""}}]}}]}`)},
				{HasData: true, Data: []byte(`{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":":1}"}}]}}]}`)},
			},
			check: func(t *testing.T, res *streaming.Result) {
				if len(res.ToolCalls) != 1 || string(res.ToolCalls[0].Arguments) != `{"a":1}` || res.ToolCalls[0].Index != 4 {
					t.Errorf("ToolCalls = %+v", res.ToolCalls)
				}
			},
		},
		{
			name: "usage null is not a report",
			events: []sse.Event{
				{HasData: true, Data: []byte(`{"id":"c1","choices":[],"usage":null}`)},
			},
			check: func(t *testing.T, res *streaming.Result) {
				if res.UsageSeen {
					t.Errorf("UsageSeen with usage null")
				}
			},
		},
		{
			name: "negative counts never credit",
			events: []sse.Event{
				{HasData: true, Data: []byte(`{"usage":{"prompt_tokens":5,"completion_tokens":-9,"prompt_tokens_details":{"cached_tokens":50}}}`)},
			},
			check: func(t *testing.T, res *streaming.Result) {
				if want := (streaming.Usage{CachedInputTokens: 50}); res.Usage != want {
					t.Errorf("Usage = %+v, want %+v", res.Usage, want)
				}
			},
		},
		{
			name: "a call whose choice never finished stays incomplete",
			events: []sse.Event{
				{HasData: true, Data: []byte(`{"id":"c","choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"id":"k","function":{"name":"f","arguments":"{}"}}]}},{"index":0,"delta":{},"finish_reason":"stop"}]}`)},
				{HasData: true, Data: []byte(`[DONE]`)},
			},
			check: func(t *testing.T, res *streaming.Result) {
				if len(res.ToolCalls) != 1 || res.ToolCalls[0].Complete || res.ToolCalls[0].Choice != 1 {
					t.Errorf("ToolCalls = %+v", res.ToolCalls)
				}
			},
		},
		{
			name: "arguments sent as an object are kept as JSON",
			events: []sse.Event{
				{HasData: true, Data: []byte(`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"k","function":{"name":"f","arguments":{"a":1}}}]},"finish_reason":"tool_calls"}]}`)},
			},
			check: func(t *testing.T, res *streaming.Result) {
				if string(res.ToolCalls[0].Arguments) != `{"a":1}` || !res.ToolCalls[0].Complete {
					t.Errorf("ToolCalls = %+v", res.ToolCalls)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := chat.Dialect{}.NewDecoder()
			for i := range tt.events {
				d.Decode(&tt.events[i])
			}
			tt.check(t, d.Finish())
		})
	}
}

var jsonCases = []streamtest.JSONCase{
	{
		Name: "text reply",
		Body: `{"id":"chatcmpl-J1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there.","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":4}}}`,
		Want: streamtest.Golden{
			ID: "chatcmpl-J1", Model: "gpt-4o", Stops: []streaming.Stop{{Reason: streaming.StopEndTurn, Raw: "stop"}},
			Usage: &streaming.Usage{InputTokens: 8, CachedInputTokens: 4, OutputTokens: 3}, Done: true,
		},
	},
	{
		Name: "parallel tool calls",
		Body: `{"id":"chatcmpl-J2","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"a","arguments":"{\"x\":1}"}},{"id":"call_2","type":"function","function":{"name":"b","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":30,"completion_tokens":20,"total_tokens":50}}`,
		Want: streamtest.Golden{
			ID: "chatcmpl-J2", Model: "gpt-4o", Stops: []streaming.Stop{{Reason: streaming.StopToolUse, Raw: "tool_calls"}},
			Calls: []streamtest.GoldenCall{
				{Index: 0, Type: "function", ID: "call_1", Name: "a", Args: `{"x":1}`, Complete: true},
				{Index: 1, Type: "function", ID: "call_2", Name: "b", Args: `{}`, Complete: true},
			},
			Usage: &streaming.Usage{InputTokens: 30, OutputTokens: 20}, Done: true,
		},
	},
	{
		Name: "two choices, one cut by length, reasoning outside completion tokens",
		Body: `{"id":"chatcmpl-J3","model":"grok-3-mini","choices":[{"index":0,"message":{"content":"A","reasoning_content":"hm"},"finish_reason":"stop"},{"index":1,"message":{"content":"B"},"finish_reason":"length"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":17,"completion_tokens_details":{"reasoning_tokens":5}}}`,
		Want: streamtest.Golden{
			ID: "chatcmpl-J3", Model: "grok-3-mini",
			Stops: []streaming.Stop{{Reason: streaming.StopEndTurn, Raw: "stop"}, {Choice: 1, Reason: streaming.StopMaxTokens, Raw: "length"}},
			Usage: &streaming.Usage{InputTokens: 10, OutputTokens: 7, ReasoningTokens: 5}, Done: true,
		},
	},
	{
		Name: "refusal",
		Body: `{"id":"chatcmpl-J4","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't."},"finish_reason":"stop"}]}`,
		Want: streamtest.Golden{ID: "chatcmpl-J4", Model: "gpt-4o", Stops: []streaming.Stop{{Reason: streaming.StopEndTurn, Raw: "stop"}}, Done: true},
	},
	{
		Name: "error body",
		Body: `{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
		Want: streamtest.Golden{
			Stops:  []streaming.Stop{{Reason: streaming.StopError, Raw: "error"}},
			Errors: []string{"invalid_request_error: Incorrect API key provided."}, Done: true,
		},
	},
	{Name: "invalid JSON", Body: `{"id":"x",`, Err: true},
	{Name: "not an object", Body: `[{"id":"x"}]`, Err: true},
	{Name: "empty body", Body: ``, Err: true},
}

func TestDecodeChatJSON(t *testing.T) {
	streamtest.CheckJSONCases(t, chat.Dialect{}, jsonCases)
}

// TestChatJSONMatchesStream: a body and the stream of the same reply give
// the same Result.
func TestChatJSONMatchesStream(t *testing.T) {
	body := `{"id":"chatcmpl-S","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hi","tool_calls":[{"id":"call_9","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":7,"completion_tokens":5,"total_tokens":12}}`
	stream := "data: {\"id\":\"chatcmpl-S\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"}}]}\n\n" +
		"data: {\"id\":\"chatcmpl-S\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_9\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n" +
		"data: {\"id\":\"chatcmpl-S\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]}}]}\n\n" +
		"data: {\"id\":\"chatcmpl-S\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n" +
		"data: {\"id\":\"chatcmpl-S\",\"model\":\"gpt-4o\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":5,\"total_tokens\":12}}\n\n" +
		"data: [DONE]\n\n"
	fromBody, err := chat.Dialect{}.DecodeJSON([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	fromStream := streamtest.MustDecode(t, chat.Dialect{}, []byte(stream))
	if !reflect.DeepEqual(fromBody, fromStream) {
		t.Errorf("body  %+v\nstream %+v", fromBody, fromStream)
	}
}

// TestChatResultSoFar: Result reflects the reply while it streams, and
// Finish may be called more than once.
func TestChatResultSoFar(t *testing.T) {
	d := chat.Dialect{}.NewDecoder()
	d.Decode(&sse.Event{HasData: true, Data: []byte(`{"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"hey"}}]}`)})
	if res := d.Result(); res.MessageID != "c1" || res.OutputBytes != 3 || res.Truncated || res.Done {
		t.Fatalf("mid-stream %+v", res)
	}
	first := d.Finish()
	d.Decode(&sse.Event{HasData: true, Data: []byte(`[DONE]`)})
	if again := d.Finish(); again != first || !again.Truncated {
		t.Errorf("second Finish changed the verdict: %+v", again)
	}
}
