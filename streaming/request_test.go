package streaming_test

import (
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
)

// requestTestdata holds recorded-shape request bodies.
const requestTestdata = "testdata/requests"

var claudeCodeTools = []string{
	"Task", "Bash", "Glob", "Grep", "ExitPlanMode", "Read", "Edit", "Write", "NotebookEdit", "WebFetch",
	"TodoWrite", "WebSearch", "BashOutput", "KillShell", "Skill", "SlashCommand", "AskUserQuestion",
	"EnterPlanMode", "ListMcpResourcesTool", "ReadMcpResourceTool", "LSP", "TaskOutput",
	"mcp__ide__getDiagnostics", "mcp__ide__executeCode",
}

func TestParseRequest(t *testing.T) {
	tests := []struct {
		name string
		api  streaming.API
		file string // under testdata/requests; body is used when empty
		body string
		want streaming.Request // Fingerprint is checked by TestRequestFingerprint
	}{
		{
			name: "claude code turn 1",
			api:  streaming.APIAnthropic, file: "anthropic-claude-code-turn1.json",
			want: streaming.Request{
				API: streaming.APIAnthropic, Model: "claude-sonnet-4-5-20250929", Stream: true,
				MaxOutputTokens: 64000, MaxOutputField: "max_tokens", Tools: claudeCodeTools,
				SessionHint: "8c1d3a52-6f0e-4b7a-9d21-3e5f7a9c0b14",
			},
		},
		{
			name: "claude code tool results after the last assistant message",
			api:  streaming.APIAnthropic, file: "anthropic-claude-code-turn2.json",
			want: streaming.Request{
				Replied: true, FirstReply: "call:toolu_01A9kTq3H5mNdZ4eXr7bVwJc", API: streaming.APIAnthropic, Model: "claude-sonnet-4-5-20250929", Stream: true,
				MaxOutputTokens: 64000, MaxOutputField: "max_tokens", Tools: claudeCodeTools,
				ToolResults: []streaming.ToolResult{
					{ID: "toolu_01BfW2nYp8cLs6RgT1uHqXeK", Type: "tool_result", IsError: true},
					{ID: "toolu_01Cx4vJm9QdEa7Nk3ZsP2yLh", Type: "tool_result"},
				},
				SessionHint: "8c1d3a52-6f0e-4b7a-9d21-3e5f7a9c0b14",
			},
		},
		{
			name: "anthropic server tools by name, else type",
			api:  streaming.APIAnthropic,
			body: `{"model":"claude-opus-4-1","max_tokens":1024,"messages":[{"role":"user","content":"hi"}],
				"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":5},
				{"type":"memory_20250818"},{"name":"get_stock","input_schema":{"type":"object"}},{},"junk",7]}`,
			want: streaming.Request{
				API: streaming.APIAnthropic, Model: "claude-opus-4-1", MaxOutputTokens: 1024, MaxOutputField: "max_tokens",
				Tools: []string{"web_search", "memory_20250818", "get_stock"},
			},
		},
		{
			name: "anthropic user text after the last assistant message ends the results",
			api:  streaming.APIAnthropic,
			body: `{"messages":[
				{"role":"user","content":"run it"},
				{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"}]},
				{"role":"assistant","content":"done"},
				{"role":"user","content":"thanks, now the next one"}]}`,
			want: streaming.Request{Replied: true, FirstReply: "call:toolu_1", API: streaming.APIAnthropic},
		},
		{
			name: "anthropic results with no assistant message at all",
			api:  streaming.APIAnthropic,
			body: `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_9","is_error":"yes"},{"type":"text","text":"x"}]}]}`,
			want: streaming.Request{API: streaming.APIAnthropic, ToolResults: []streaming.ToolResult{{ID: "toolu_9", Type: "tool_result"}}},
		},
		{
			name: "anthropic user_id in Claude Code's older form gives its session part",
			api:  streaming.APIAnthropic,
			body: `{"metadata":{"user_id":"user_2f6c_account__session_9a1b"},"system":"You are terse."}`,
			want: streaming.Request{API: streaming.APIAnthropic, SessionHint: "9a1b"},
		},
		{
			name: "anthropic user_id naming a user, not a session, gives no hint",
			api:  streaming.APIAnthropic,
			body: `{"metadata":{"user_id":"alice@example.com"}}`,
			want: streaming.Request{API: streaming.APIAnthropic},
		},
		{
			name: "chat prompt_cache_key is the session hint",
			api:  streaming.APIChat,
			body: `{"prompt_cache_key":"ses_7f3a","messages":[{"role":"user","content":"hi"}]}`,
			want: streaming.Request{API: streaming.APIChat, SessionHint: "ses_7f3a"},
		},
		{
			name: "responses conversation id is the session hint without prompt_cache_key",
			api:  streaming.APIResponses,
			body: `{"conversation":{"id":"conv_9"},"input":"hi"}`,
			want: streaming.Request{API: streaming.APIResponses, SessionHint: "conv_9"},
		},
		{
			name: "a session hint longer than MaxSessionHint is none",
			api:  streaming.APIChat,
			body: `{"prompt_cache_key":"` + strings.Repeat("k", streaming.MaxSessionHint+1) + `"}`,
			want: streaming.Request{API: streaming.APIChat},
		},
		{
			name: "chat first reply of text: its text's mark",
			api:  streaming.APIChat,
			body: `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"hel"},{"type":"text","text":"lo"}]},
				{"role":"user","content":"more"},{"role":"assistant","tool_calls":[{"id":"call_later"}]}]}`,
			want: streaming.Request{API: streaming.APIChat, Replied: true, FirstReply: streaming.TextMark(xxhash.Sum64String("hello"))},
		},
		{
			name: "anthropic first reply: its first tool_use, not a server tool's",
			api:  streaming.APIAnthropic,
			body: `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"x"},
				{"type":"server_tool_use","id":"srvtoolu_1"},{"type":"tool_use","id":"toolu_\u0041"}]}]}`,
			want: streaming.Request{API: streaming.APIAnthropic, Replied: true, FirstReply: "call:toolu_A"},
		},
		{
			name: "anthropic JSON user_id without session_id gives no hint",
			api:  streaming.APIAnthropic,
			body: `{"metadata":{"user_id":"{\"device_id\":\"d1\",\"account_uuid\":\"a1\"}"}}`,
			want: streaming.Request{API: streaming.APIAnthropic},
		},
		{
			name: "anthropic escaped keys and values decode",
			api:  streaming.APIAnthropic,
			body: `{"mod\u0065l":"claude-\u0033-haiku","stream":true,"messages":[{"role":"assistant","content":[]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_\"q\"","is_error":true}]}]}`,
			want: streaming.Request{
				Replied: true, API: streaming.APIAnthropic, Model: "claude-3-haiku", Stream: true,
				ToolResults: []streaming.ToolResult{{ID: `toolu_"q"`, Type: "tool_result", IsError: true}},
			},
		},
		{
			name: "anthropic members of the wrong type are absent",
			api:  streaming.APIAnthropic,
			body: `{"model":42,"stream":"yes","max_tokens":"100","tools":{"name":"Bash"},"messages":"hi",
				"system":7,"metadata":"user","thinking":null}`,
			want: streaming.Request{API: streaming.APIAnthropic},
		},
		{
			name: "a member given twice takes its last value",
			api:  streaming.APIAnthropic,
			body: `{"max_tokens":10,"stream":true,"max_tokens":20000,"stream":false}`,
			want: streaming.Request{API: streaming.APIAnthropic, MaxOutputTokens: 20000, MaxOutputField: "max_tokens"},
		},
		{
			name: "openai sdk chat with parallel tool results",
			api:  streaming.APIChat, file: "chat-openai-sdk-parallel-tools.json",
			want: streaming.Request{
				Replied: true, FirstReply: "call:call_5ZcN1rQ0pX8vT2mW", API: streaming.APIChat, Model: "gpt-4o-2024-08-06", Stream: true,
				MaxOutputTokens: 2048, MaxOutputField: "max_completion_tokens", IncludeUsage: true,
				Tools: []string{"get_weather", "get_time_zone", "run_sql"},
				ToolResults: []streaming.ToolResult{
					{ID: "call_Bq7Yt3LkV9sD1fHe", Type: "tool"},
					{ID: "call_Wr4Hn8PjX2cM6gUa", Type: "tool"},
				},
			},
		},
		{
			name: "chat max_tokens when max_completion_tokens is absent",
			api:  streaming.APIChat,
			body: `{"model":"deepseek-chat","max_tokens":8192,"stream_options":{"include_usage":false},"stream":true}`,
			want: streaming.Request{API: streaming.APIChat, Model: "deepseek-chat", Stream: true, MaxOutputTokens: 8192, MaxOutputField: "max_tokens"},
		},
		{
			name: "chat max_completion_tokens of the wrong type falls back to max_tokens",
			api:  streaming.APIChat,
			body: `{"max_completion_tokens":"lots","max_tokens":300,"stream_options":true}`,
			want: streaming.Request{API: streaming.APIChat, MaxOutputTokens: 300, MaxOutputField: "max_tokens"},
		},
		{
			name: "chat legacy functions; role function results are skipped",
			api:  streaming.APIChat,
			body: `{"model":"gpt-3.5-turbo-0613","functions":[{"name":"get_weather","parameters":{}}],"messages":[
				{"role":"user","content":"weather?"},
				{"role":"assistant","content":null,"function_call":{"name":"get_weather","arguments":"{}"}},
				{"role":"function","name":"get_weather","content":"sunny"}]}`,
			want: streaming.Request{Replied: true, API: streaming.APIChat, Model: "gpt-3.5-turbo-0613", Tools: []string{"get_weather"}},
		},
		{
			name: "chat tool results of earlier turns are not the tail",
			api:  streaming.APIChat,
			body: `{"tools":[{"type":"function","function":{"name":"f"}},{"type":"custom","custom":{"name":"g"}},{"type":"x","name":"h"}],
				"messages":[{"role":"assistant","tool_calls":[{"id":"call_1"}]},{"role":"tool","tool_call_id":"call_1","content":"a"},
				{"role":"assistant","content":"which file?"},{"role":"user","content":"main.go"}]}`,
			want: streaming.Request{Replied: true, FirstReply: "call:call_1", API: streaming.APIChat, Tools: []string{"f", "g", "h"}},
		},
		{
			name: "codex responses with a function call tail",
			api:  streaming.APIResponses, file: "responses-codex-exec.json",
			want: streaming.Request{
				Replied: true, FirstReply: "call:call_qH3vX9mT1bR5nW2k", API: streaming.APIResponses, Model: "gpt-5-codex", Stream: true,
				Tools: []string{"exec_command", "write_stdin", "apply_patch", "search_docs", "fetch_doc", "web_search"},
				ToolResults: []streaming.ToolResult{
					{ID: "call_Tz1kU6wE3rY8oP4s", Type: "function_call_output"},
					{ID: "call_Vm5gJ2hB7nC9xQ1d", Type: "function_call_output"},
				},
				SessionHint: "019ad5c2-7e41-7c90-b2f3-5a8d1e6c4f27",
			},
		},
		{
			name: "codex code mode tools come from additional_tools",
			api:  streaming.APIResponses, file: "responses-codex-code-mode.json",
			want: streaming.Request{
				Replied: true, FirstReply: "call:call_Ex3cR7uN2mK9tW5q", API: streaming.APIResponses, Model: "gpt-5.1-codex", Stream: true,
				MaxOutputTokens: 32000, MaxOutputField: "max_output_tokens",
				Tools:       []string{"exec", "view_image"},
				ToolResults: []streaming.ToolResult{{ID: "call_Ex3cR7uN2mK9tW5q", Type: "custom_tool_call_output"}},
				SessionHint: "019ad5d0-1b2c-7d3e-8f40-6a7b8c9d0e1f",
			},
		},
		{
			name: "responses with previous_response_id: every output is the tail",
			api:  streaming.APIResponses, file: "responses-previous-response-id.json",
			want: streaming.Request{
				Replied: true, FirstReply: "resp:resp_68a1f0c2e4b8819c9a3e5d7f1b2c4d6e", API: streaming.APIResponses, Model: "gpt-4.1-mini", Tools: []string{"order_status"},
				ToolResults: []streaming.ToolResult{
					{ID: "call_Aa1Bb2Cc3Dd4Ee5F", Type: "function_call_output"},
					{ID: "call_Gg6Hh7Ii8Jj9Kk0L", Type: "function_call_output"},
				},
			},
		},
		{
			name: "responses plain string input and hosted tools",
			api:  streaming.APIResponses,
			body: `{"model":"o4-mini","input":"Find the docs","max_output_tokens":500,
				"tools":[{"type":"file_search","vector_store_ids":["vs_1"]},{"type":"mcp","server_label":"dice"},{"type":"code_interpreter"}]}`,
			want: streaming.Request{
				API: streaming.APIResponses, Model: "o4-mini", MaxOutputTokens: 500, MaxOutputField: "max_output_tokens",
				Tools: []string{"file_search", "mcp", "code_interpreter"},
			},
		},
		{
			name: "responses assistant message and shell calls end the results",
			api:  streaming.APIResponses,
			body: `{"input":[{"type":"function_call_output","call_id":"c1","output":"x"},
				{"role":"assistant","content":"ok"},{"role":"user","content":"again"},
				{"type":"custom_tool_call_output","call_id":"c2","output":"y"},
				{"type":"shell_call","call_id":"c3"},{"type":"function_call_output","call_id":"c4","output":"z"}]}`,
			want: streaming.Request{Replied: true, FirstReply: streaming.TextMark(0xfc6d24b916145cf9), API: streaming.APIResponses, ToolResults: []streaming.ToolResult{{ID: "c4", Type: "function_call_output"}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			if tc.file != "" {
				body = fixturetest.ReadFile(t, requestTestdata, tc.file)
			}
			got, err := dialects[tc.api].ParseRequest(body)
			if err != nil {
				t.Fatalf("ParseRequest: %v", err)
			}
			if b, err := hex.DecodeString(got.Fingerprint); err != nil || len(b) != 16 {
				t.Errorf("Fingerprint = %q, want 32 hex digits", got.Fingerprint)
			}
			got.Fingerprint = ""
			for i := range got.ToolResults {
				// Digests are checked in TestResultDigestsAndFailures.
				got.ToolResults[i].Digest = 0
			}
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("ParseRequest =\n%+v\nwant\n%+v", *got, tc.want)
			}
		})
	}
}

func TestParseRequestErrors(t *testing.T) {
	deep := func(depth int) string {
		return `{"a":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`
	}
	tests := []struct {
		name string
		api  streaming.API
		body string
		want error
	}{
		{"empty body", streaming.APIAnthropic, ``, streaming.ErrInvalidJSON},
		{"blank body", streaming.APIChat, " \n\t", streaming.ErrInvalidJSON},
		{"null", streaming.APIResponses, `null`, streaming.ErrInvalidJSON},
		{"array", streaming.APIChat, `[{"model":"gpt-4o"}]`, streaming.ErrInvalidJSON},
		{"string", streaming.APIAnthropic, `"{}"`, streaming.ErrInvalidJSON},
		{"truncated", streaming.APIAnthropic, `{"model":"claude","messages":[`, streaming.ErrInvalidJSON},
		{"missing value", streaming.APIChat, `{"model":}`, streaming.ErrInvalidJSON},
		{"trailing garbage", streaming.APIResponses, `{"model":"x"} {"model":"y"}`, streaming.ErrInvalidJSON},
		{"unterminated string", streaming.APIAnthropic, `{"model":"x}`, streaming.ErrInvalidJSON},
		{"bad escape", streaming.APIAnthropic, `{"model":"\x"}`, streaming.ErrInvalidJSON},
		{"byte order mark", streaming.APIChat, "\xEF\xBB\xBF{}", streaming.ErrInvalidJSON},
		{"nested too deep", streaming.APIAnthropic, deep(jsonscan.MaxNesting + 1), streaming.ErrInvalidJSON},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := dialects[tc.api].ParseRequest([]byte(tc.body))
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if req != nil {
				t.Errorf("req = %+v, want nil", req)
			}
		})
	}
	t.Run("nesting at the limit is accepted", func(t *testing.T) {
		if _, err := dialects[streaming.APIAnthropic].ParseRequest([]byte(deep(jsonscan.MaxNesting))); err != nil {
			t.Fatal(err)
		}
	})
}

// TestParseRequestOwnsItsStrings checks that nothing in a Request points
// into the body, which the proxy reuses.
func TestParseRequestOwnsItsStrings(t *testing.T) {
	files := []struct {
		api  streaming.API
		file string
	}{
		{streaming.APIAnthropic, "anthropic-claude-code-turn2.json"},
		{streaming.APIChat, "chat-openai-sdk-parallel-tools.json"},
		{streaming.APIResponses, "responses-codex-exec.json"},
		{streaming.APIResponses, "responses-codex-code-mode.json"},
	}
	for _, f := range files {
		t.Run(f.file, func(t *testing.T) {
			body := fixturetest.ReadFile(t, requestTestdata, f.file)
			want, err := dialects[f.api].ParseRequest(body)
			if err != nil {
				t.Fatal(err)
			}
			got, err := dialects[f.api].ParseRequest(body)
			if err != nil {
				t.Fatal(err)
			}
			for i := range body {
				body[i] = '#'
			}
			if !reflect.DeepEqual(got, want) || got.Model == "" || len(got.Tools) == 0 || len(got.ToolResults) == 0 {
				t.Fatalf("request changed with its body: %+v, want %+v", got, want)
			}
			// want and got were parsed from the same bytes; check against
			// fixed values too, since both would alias the body alike.
			for _, s := range append(append([]string{got.Model, got.SessionHint}, got.Tools...), got.ToolResults[0].ID) {
				if strings.Contains(s, "#") {
					t.Fatalf("%q points into the body", s)
				}
			}
		})
	}
}

// TestParseRequestAllocations checks that the work of ParseRequest does not
// allocate with the size of the body: a long conversation costs the same
// allocations as a short one with the same tools and results.
func TestParseRequestAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	small := claudeCodeBody(4)
	large := claudeCodeBody(80)
	count := func(body []byte) float64 {
		return testing.AllocsPerRun(20, func() {
			if _, err := dialects[streaming.APIAnthropic].ParseRequest(body); err != nil {
				t.Fatal(err)
			}
		})
	}
	s, l := count(small), count(large)
	if l > s {
		t.Errorf("allocations grow with the body: %v for %d bytes, %v for %d bytes", s, len(small), l, len(large))
	}
	if s > 16 {
		t.Errorf("%v allocations per request, want at most 16", s)
	}
}
