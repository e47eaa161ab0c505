package anthropic_test

import (
	"cmp"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/internal/streamtest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/anthropic"
	"gatekeeper/streaming/sse"
)

const testdata = "testdata"

// fragmentedArgs is the input of the call in tool_use_fragmented.sse: its
// fragments split escapes (\\, \", \t, \u00e9, a surrogate pair) apart.
const fragmentedArgs = `{"path": "C:\\tmp\\\"q\".txt", "note": "tab\there \u00e9 \ud83d\ude00", "raw": "é😀"}`

type anthropicGolden struct {
	file      string
	id, model string
	stops     []streaming.Stop
	calls     []streaming.ToolCall
	usage     streaming.Usage
	noUsage   bool
	errors    []streaming.ProviderError // Type and Message compared; Raw must be the event's JSON
	text      string                    // every text delta the decoder counts, concatenated
	// said is every text delta of the stream, counted or not, when it
	// differs from text (deltas of blocks never started).
	said        string
	thinking    string // every thinking delta, concatenated
	outputBytes int64
	done        bool
	truncated   bool
	unparsed    int
}

func stopOf(r streaming.StopReason) []streaming.Stop {
	return []streaming.Stop{{Reason: r, Raw: string(r)}}
}

var anthropicGoldens = []anthropicGolden{
	{
		file: "text.sse", id: "msg_01TextStream", model: "claude-test-1",
		stops: stopOf(streaming.StopEndTurn),
		usage: streaming.Usage{InputTokens: 25, OutputTokens: 12},
		text:  "Hello, wörld!\nTabs\tand \"quotes\" and \\ and 😀.", outputBytes: 48, done: true,
	},
	{
		file: "tool_use_fragmented.sse", id: "msg_01ToolFrag", model: "claude-test-1",
		stops: stopOf(streaming.StopToolUse),
		calls: []streaming.ToolCall{{Index: 1, Type: "tool_use", ID: "toolu_01Frag", Name: "read_file", Arguments: []byte(fragmentedArgs), Complete: true}},
		usage: streaming.Usage{InputTokens: 599, OutputTokens: 135},
		text:  "Reading it.", outputBytes: 99, done: true,
	},
	{
		file: "tool_no_args.sse", id: "msg_01NoArgs", model: "claude-test-1",
		stops: stopOf(streaming.StopToolUse),
		calls: []streaming.ToolCall{{Index: 1, Type: "tool_use", ID: "toolu_01NoArgs", Name: "refresh_list", Arguments: []byte("{}"), Complete: true}},
		usage: streaming.Usage{InputTokens: 565, OutputTokens: 48},
		text:  "Updating.", outputBytes: 9, done: true,
	},
	{
		file: "thinking_signature.sse", id: "msg_01Think", model: "claude-test-2",
		stops:    stopOf(streaming.StopEndTurn),
		usage:    streaming.Usage{InputTokens: 43, OutputTokens: 282, ReasoningTokens: 200},
		thinking: "The user asks about streets.", text: "Look both ways.", outputBytes: 43, done: true,
	},
	{
		file: "redacted_thinking.sse", id: "msg_01Redacted", model: "claude-test-2",
		stops: stopOf(streaming.StopEndTurn),
		usage: streaming.Usage{InputTokens: 92, OutputTokens: 189},
		text:  "Done thinking.", outputBytes: 14, done: true,
	},
	{
		file: "server_tool_then_tool_use.sse", id: "msg_01Server", model: "claude-test-3",
		stops: stopOf(streaming.StopToolUse),
		calls: []streaming.ToolCall{
			{Index: 1, Type: "server_tool_use", ID: "srvtoolu_01Search", Name: "tool_search_tool_regex", Arguments: []byte(`{"pattern": "weather"}`), Complete: true, Server: true},
			{Index: 4, Type: "tool_use", ID: "toolu_01Weather", Name: "get_weather", Arguments: []byte(`{"location": "San Francisco, CA"}`), Complete: true},
		},
		usage: streaming.Usage{InputTokens: 1595, OutputTokens: 143}, // 727 at message_start
		text:  "Let me find a tool.Checking.", outputBytes: 83, done: true,
	},
	{
		file: "pause_turn.sse", id: "msg_01Pause", model: "claude-test-3",
		stops: stopOf(streaming.StopPauseTurn),
		calls: []streaming.ToolCall{
			{Index: 0, Type: "server_tool_use", ID: "srvtoolu_01A", Name: "web_search", Arguments: []byte(`{"query": "ferry times"}`), Complete: true, Server: true},
			{Index: 2, Type: "server_tool_use", ID: "srvtoolu_01B", Name: "web_search", Arguments: []byte(`{"query": "bridge traffic"}`), Complete: true, Server: true},
		},
		usage:       streaming.Usage{InputTokens: 404500, OutputTokens: 943, ReasoningTokens: 261},
		outputBytes: 51, done: true,
	},
	{
		file: "refusal.sse", id: "msg_01Refusal", model: "claude-test-1",
		stops: stopOf(streaming.StopRefusal),
		usage: streaming.Usage{InputTokens: 30, OutputTokens: 5},
		text:  "I can't", outputBytes: 7, done: true,
	},
	{
		file: "max_tokens_cache_read.sse", id: "msg_01CacheRead", model: "claude-test-1",
		stops: stopOf(streaming.StopMaxTokens),
		usage: streaming.Usage{InputTokens: 11, CachedInputTokens: 1031, OutputTokens: 100},
		text:  "A long answer that gets cut", outputBytes: 27, done: true,
	},
	{
		file: "stop_sequence_cache_write.sse", id: "msg_01CacheWrite", model: "claude-test-1",
		stops: stopOf(streaming.StopSequence),
		usage: streaming.Usage{InputTokens: 18, CacheWriteTokens: 1031, OutputTokens: 6},
		text:  "one, two, ", outputBytes: 10, done: true,
	},
	{
		file: "error_midstream.sse", id: "msg_01Error", model: "claude-test-1",
		stops:  stopOf(streaming.StopError),
		errors: []streaming.ProviderError{{Type: "overloaded_error", Message: "Overloaded"}},
		usage:  streaming.Usage{InputTokens: 40, OutputTokens: 1},
		text:   "Partial answ", outputBytes: 12,
	},
	{
		file: "unknown_stop_reason.sse", id: "msg_01Future", model: "claude-test-9",
		stops: stopOf("quota_of_the_future"),
		usage: streaming.Usage{InputTokens: 10, OutputTokens: 2},
		text:  "ok", outputBytes: 2, done: true,
	},
	{
		file: "context_window_exceeded.sse", id: "msg_01Window", model: "claude-test-9",
		stops: []streaming.Stop{{Reason: streaming.StopMaxTokens, Raw: "model_context_window_exceeded"}},
		usage: streaming.Usage{InputTokens: 199000, OutputTokens: 1000},
		text:  "and so", outputBytes: 6, done: true,
	},
	{
		file: "unknown_types.sse", id: "msg_01Unknown", model: "claude-test-4",
		stops: stopOf(streaming.StopEndTurn),
		calls: []streaming.ToolCall{
			{Index: 2, Type: "mcp_tool_use", ID: "mcptoolu_01A", Name: "echo", Arguments: []byte(`{"msg": "hi"}`), Complete: true, Server: true},
			// Input given whole at the start, no deltas: kept as it came.
			{Index: 4, Type: "code_interpreter_tool_use", ID: "citoolu_01A", Name: "run", Arguments: []byte(`{"code":"print(1)"}`), Complete: true, Server: true},
		},
		usage: streaming.Usage{InputTokens: 50, OutputTokens: 20},
		text:  "Per the doc, yes.", outputBytes: 30, done: true,
	},
	{
		file: "truncated_mid_tool.sse", id: "msg_01Cut", model: "claude-test-1",
		calls: []streaming.ToolCall{{Index: 1, Type: "tool_use", ID: "toolu_01Cut", Name: "delete_path", Arguments: []byte(`{"path": "/tm`)}},
		usage: streaming.Usage{InputTokens: 70, OutputTokens: 1},
		text:  "Deleting.", outputBytes: 22, truncated: true,
	},
	{
		file: "truncated_mid_event.sse", id: "msg_01CutLine", model: "claude-test-1",
		usage: streaming.Usage{InputTokens: 70, OutputTokens: 1},
		text:  "Half", outputBytes: 4, truncated: true, unparsed: 1,
	},
	{
		file: "unterminated_message_stop.sse", id: "msg_01NoBlank", model: "claude-test-1",
		stops: stopOf(streaming.StopEndTurn),
		usage: streaming.Usage{InputTokens: 5, OutputTokens: 2},
		text:  "Hi", outputBytes: 2, done: true,
	},
	{
		// Two broken JSON payloads, a delta without index, a delta and a
		// stop for blocks never started, a text_delta without text, a
		// message_start without message, a usage count that is a string.
		file: "malformed_events.sse", id: "msg_01Bad", model: "claude-test-1",
		stops: stopOf(streaming.StopEndTurn),
		usage: streaming.Usage{InputTokens: 8, OutputTokens: 1},
		text:  "kept", said: "lostorphankept", outputBytes: 4, done: true, unparsed: 8,
	},
}

func TestAnthropicGolden(t *testing.T) {
	for _, g := range anthropicGoldens {
		t.Run(g.file, func(t *testing.T) {
			stream := fixturetest.ReadFile(t, testdata, g.file)
			res, said := streamtest.MustDecode(t, anthropic.Dialect{}, stream), streamtest.AnthropicSays(t, stream)
			if res.API != streaming.APIAnthropic || res.MessageID != g.id || res.Model != g.model {
				t.Errorf("api/id/model = %s %s %s, want anthropic %s %s", res.API, res.MessageID, res.Model, g.id, g.model)
			}
			if !slices.Equal(res.Stops, g.stops) {
				t.Errorf("stops = %+v, want %+v", res.Stops, g.stops)
			}
			if !reflect.DeepEqual(res.ToolCalls, g.calls) {
				t.Errorf("tool calls =\n%s\nwant\n%s", streamtest.FormatCalls(res.ToolCalls), streamtest.FormatCalls(g.calls))
			}
			if res.Usage != g.usage || res.UsageSeen == g.noUsage {
				t.Errorf("usage = %+v (seen %v), want %+v", res.Usage, res.UsageSeen, g.usage)
			}
			if len(res.Errors) != len(g.errors) {
				t.Fatalf("errors = %+v, want %+v", res.Errors, g.errors)
			}
			for i, e := range res.Errors {
				if e.Type != g.errors[i].Type || e.Message != g.errors[i].Message || !json.Valid(e.Raw) {
					t.Errorf("error %d = %s %q raw %q, want %s %q", i, e.Type, e.Message, e.Raw, g.errors[i].Type, g.errors[i].Message)
				}
			}
			if res.Done != g.done || res.Truncated != g.truncated {
				t.Errorf("done %v truncated %v, want %v %v", res.Done, res.Truncated, g.done, g.truncated)
			}
			if res.Unparsed != g.unparsed || len(res.UnparsedErrors) != min(g.unparsed, streaming.MaxUnparsedErrors) {
				t.Errorf("unparsed %d %v, want %d", res.Unparsed, res.UnparsedErrors, g.unparsed)
			}
			for _, err := range res.UnparsedErrors {
				if !errors.Is(err, streaming.ErrInvalidJSON) {
					t.Errorf("unparsed error %v is not ErrInvalidJSON", err)
				}
			}
			if res.OutputBytes != g.outputBytes {
				t.Errorf("output bytes = %d, want %d", res.OutputBytes, g.outputBytes)
			}
			wantSaid := cmp.Or(g.said, g.text)
			if said.Text != wantSaid || said.Thinking != g.thinking || res.TextBytes != int64(len(g.text)) {
				t.Errorf("text %q (%d bytes counted) thinking %q, want %q (%d) %q", said.Text, res.TextBytes, said.Thinking, wantSaid, len(g.text), g.thinking)
			}
		})
	}
}

// TestAnthropicTestdataCovered keeps every testdata stream under a golden.
func TestAnthropicTestdataCovered(t *testing.T) {
	covered := map[string]bool{}
	for _, g := range anthropicGoldens {
		covered[g.file] = true
	}
	streamtest.CheckCovered(t, testdata, covered)
	if files := fixturetest.Glob(t, filepath.Join(testdata, "*.sse")); len(files) != len(anthropicGoldens) {
		t.Errorf("%d testdata files, %d goldens", len(files), len(anthropicGoldens))
	}
}

func anthropicEvent(name, data string) string {
	return "event: " + name + "\ndata: " + data + "\n\n"
}

// TestAnthropicEventRules covers one rule each, on short inline streams.
func TestAnthropicEventRules(t *testing.T) {
	const (
		start    = `{"type":"message_start","message":{"id":"msg_1","model":"m","usage":{"input_tokens":10,"cache_read_input_tokens":4,"output_tokens":1}}}`
		textOpen = `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`
		toolOpen = `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}`
		stop     = `{"type":"message_stop"}`
	)
	tests := []struct {
		name   string
		stream string
		check  func(t *testing.T, res *streaming.Result)
	}{
		{
			name: "error named by the event only, OpenAI-style body",
			stream: anthropicEvent("message_start", start) +
				anthropicEvent("error", `{"error":{"type":"rate_limit_error","message":"slow down"}}`),
			check: func(t *testing.T, res *streaming.Result) {
				if len(res.Errors) != 1 || res.Errors[0].Type != "rate_limit_error" || res.Errors[0].Message != "slow down" {
					t.Errorf("errors = %+v", res.Errors)
				}
				if res.Truncated || res.Done || res.StopReason() != streaming.StopError {
					t.Errorf("truncated %v done %v stop %v", res.Truncated, res.Done, res.StopReason())
				}
			},
		},
		{
			name:   "error named by the data type only",
			stream: "data: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"boom\"}}\n\n",
			check: func(t *testing.T, res *streaming.Result) {
				if len(res.Errors) != 1 || res.Errors[0].Type != "api_error" || res.Truncated {
					t.Errorf("errors = %+v truncated %v", res.Errors, res.Truncated)
				}
			},
		},
		{
			name:   "error without a type is kept and counted",
			stream: anthropicEvent("error", `{"type":"error"}`),
			check: func(t *testing.T, res *streaming.Result) {
				if len(res.Errors) != 1 || res.Unparsed != 1 || res.Truncated {
					t.Errorf("errors %+v unparsed %d truncated %v", res.Errors, res.Unparsed, res.Truncated)
				}
			},
		},
		{
			name:   "error that is not JSON is counted and the stream is truncated",
			stream: anthropicEvent("error", `Overloaded`),
			check: func(t *testing.T, res *streaming.Result) {
				if len(res.Errors) != 0 || res.Unparsed != 1 || !res.Truncated {
					t.Errorf("errors %+v unparsed %d truncated %v", res.Errors, res.Unparsed, res.Truncated)
				}
			},
		},
		{
			name: "an error after the stop replaces it",
			stream: anthropicEvent("message_start", start) +
				anthropicEvent("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}`) +
				anthropicEvent("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`),
			check: func(t *testing.T, res *streaming.Result) {
				if !slices.Equal(res.Stops, stopOf(streaming.StopError)) {
					t.Errorf("stops = %+v", res.Stops)
				}
			},
		},
		{
			name: "usage overlays field by field across deltas, null keeps the earlier value",
			stream: anthropicEvent("message_start", start) +
				anthropicEvent("message_delta", `{"type":"message_delta","delta":{"stop_reason":null},"usage":{"input_tokens":25,"output_tokens":7,"cache_read_input_tokens":null}}`) +
				anthropicEvent("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9,"cache_creation_input_tokens":2}}`) +
				anthropicEvent("message_stop", stop),
			check: func(t *testing.T, res *streaming.Result) {
				want := streaming.Usage{InputTokens: 25, CachedInputTokens: 4, CacheWriteTokens: 2, OutputTokens: 9}
				if res.Usage != want || len(res.Stops) != 1 || res.Unparsed != 0 {
					t.Errorf("usage %+v stops %+v unparsed %d, want %+v", res.Usage, res.Stops, res.Unparsed, want)
				}
			},
		},
		{
			name: "a negative count is refused and counted",
			stream: anthropicEvent("message_start", start) +
				anthropicEvent("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":-5}}`),
			check: func(t *testing.T, res *streaming.Result) {
				if res.Usage.OutputTokens != 1 || res.Unparsed != 1 {
					t.Errorf("usage %+v unparsed %d", res.Usage, res.Unparsed)
				}
			},
		},
		{
			name: "a block started twice is counted, the second start wins",
			stream: anthropicEvent("content_block_start", toolOpen) +
				anthropicEvent("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_2","name":"g","input":{}}}`) +
				anthropicEvent("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"}}`) +
				anthropicEvent("content_block_stop", `{"type":"content_block_stop","index":1}`),
			check: func(t *testing.T, res *streaming.Result) {
				if res.Unparsed != 1 || len(res.ToolCalls) != 2 {
					t.Fatalf("unparsed %d calls %s", res.Unparsed, streamtest.FormatCalls(res.ToolCalls))
				}
				if first, second := res.ToolCalls[0], res.ToolCalls[1]; first.Complete || !second.Complete || string(second.Arguments) != `{"a":1}` {
					t.Errorf("calls %s", streamtest.FormatCalls(res.ToolCalls))
				}
			},
		},
		{
			name: "input_json_delta on a text block is counted",
			stream: anthropicEvent("content_block_start", textOpen) +
				anthropicEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{}"}}`),
			check: func(t *testing.T, res *streaming.Result) {
				if res.Unparsed != 1 || res.OutputBytes != 0 {
					t.Errorf("unparsed %d output %d", res.Unparsed, res.OutputBytes)
				}
			},
		},
		{
			name:   "a tool_use block without a name is still a call",
			stream: anthropicEvent("content_block_start", `{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_3","input":{}}}`),
			check: func(t *testing.T, res *streaming.Result) {
				if res.Unparsed != 1 || len(res.ToolCalls) != 1 || res.ToolCalls[0].ID != "toolu_3" || res.ToolCalls[0].Complete {
					t.Errorf("unparsed %d calls %s", res.Unparsed, streamtest.FormatCalls(res.ToolCalls))
				}
			},
		},
		{
			name:   "text given in the block start is counted unescaped",
			stream: anthropicEvent("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"Hi \"you\""}}`),
			check: func(t *testing.T, res *streaming.Result) {
				if res.TextBytes != 8 || res.OutputBytes != 8 || res.Unparsed != 0 {
					t.Errorf("text %d output %d unparsed %d", res.TextBytes, res.OutputBytes, res.Unparsed)
				}
			},
		},
		{
			name:   "events without data and comments are ignored",
			stream: ": keepalive\n\nevent: ping\n\nretry: 10\n\n\n\n",
			check: func(t *testing.T, res *streaming.Result) {
				if !reflect.DeepEqual(res, &streaming.Result{API: streaming.APIAnthropic, Truncated: true}) {
					t.Errorf("result %+v", res)
				}
			},
		},
		{
			name:   "an empty data field is not JSON",
			stream: "event: content_block_delta\ndata:\n\n",
			check: func(t *testing.T, res *streaming.Result) {
				if res.Unparsed != 1 {
					t.Errorf("unparsed %d", res.Unparsed)
				}
			},
		},
		{
			name:   "a fractional block index is counted",
			stream: anthropicEvent("content_block_start", `{"type":"content_block_start","index":1.5,"content_block":{"type":"text","text":""}}`),
			check: func(t *testing.T, res *streaming.Result) {
				if res.Unparsed != 1 {
					t.Errorf("unparsed %d", res.Unparsed)
				}
			},
		},
		{
			name: "a huge block index costs nothing",
			stream: anthropicEvent("content_block_start", `{"type":"content_block_start","index":2147483647,"content_block":{"type":"tool_use","id":"t","name":"n","input":{}}}`) +
				anthropicEvent("content_block_stop", `{"type":"content_block_stop","index":2147483647}`),
			check: func(t *testing.T, res *streaming.Result) {
				if res.Unparsed != 0 || len(res.ToolCalls) != 1 || !res.ToolCalls[0].Complete || res.ToolCalls[0].Index != 2147483647 {
					t.Errorf("unparsed %d calls %s", res.Unparsed, streamtest.FormatCalls(res.ToolCalls))
				}
			},
		},
		{
			name: "a second message_start takes the newer identity",
			stream: anthropicEvent("message_start", start) +
				anthropicEvent("message_start", `{"type":"message_start","message":{"id":"msg_2","model":"m2","usage":{"input_tokens":3,"output_tokens":1}}}`),
			check: func(t *testing.T, res *streaming.Result) {
				if res.MessageID != "msg_2" || res.Model != "m2" || res.Usage.InputTokens != 3 || res.Usage.CachedInputTokens != 4 {
					t.Errorf("id %s model %s usage %+v", res.MessageID, res.Model, res.Usage)
				}
			},
		},
		{
			name:   "a stop_reason that is not a string is counted",
			stream: anthropicEvent("message_delta", `{"type":"message_delta","delta":{"stop_reason":7},"usage":{"output_tokens":1}}`),
			check: func(t *testing.T, res *streaming.Result) {
				if res.Unparsed != 1 || len(res.Stops) != 0 || !res.UsageSeen {
					t.Errorf("unparsed %d stops %+v usage seen %v", res.Unparsed, res.Stops, res.UsageSeen)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := streamtest.MustDecode(t, anthropic.Dialect{}, []byte(tt.stream))
			tt.check(t, res)
		})
	}
}

func TestAnthropicFinish(t *testing.T) {
	d := anthropic.Dialect{}.NewDecoder()
	if d.Result() != d.Finish() || !d.Result().Truncated {
		t.Fatal("an empty stream must finish truncated, on the decoder's own result")
	}
	r := sse.NewReader(0)
	err := r.Feed([]byte(anthropicEvent("message_stop", `{"type":"message_stop"}`)), func(ev *sse.Event) error {
		d.Decode(ev)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res := d.Finish(); !res.Done || res.Truncated {
		t.Errorf("done %v truncated %v after message_stop", res.Done, res.Truncated)
	}
}

func TestDecodeAnthropicJSON(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    *streaming.Result
		wantErr error
	}{
		{
			name: "message with every block kind",
			body: `{"id":"msg_1","type":"message","role":"assistant","model":"claude-test-1","content":[
				{"type":"thinking","thinking":"hmm","signature":"sig"},
				{"type":"redacted_thinking","data":"abc"},
				{"type":"text","text":"Let me look."},
				{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"x"}},
				{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]},
				{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{ "location" : "SF" },"caller":{"type":"direct"}}
			],"stop_reason":"tool_use","stop_sequence":null,
			"usage":{"input_tokens":100,"cache_read_input_tokens":50,"cache_creation_input_tokens":25,"output_tokens":40,"output_tokens_details":{"thinking_tokens":12}}}`,
			want: &streaming.Result{
				API: streaming.APIAnthropic, MessageID: "msg_1", Model: "claude-test-1",
				Stops: stopOf(streaming.StopToolUse),
				ToolCalls: []streaming.ToolCall{
					{Index: 3, Type: "server_tool_use", ID: "srvtoolu_1", Name: "web_search", Arguments: []byte(`{"query":"x"}`), Complete: true, Server: true},
					{Index: 5, Type: "tool_use", ID: "toolu_1", Name: "get_weather", Arguments: []byte(`{ "location" : "SF" }`), Complete: true},
				},
				Usage:     streaming.Usage{InputTokens: 100, CachedInputTokens: 50, CacheWriteTokens: 25, OutputTokens: 40, ReasoningTokens: 12},
				UsageSeen: true, UsageFinal: true, Done: true,
				OutputBytes: int64(len("hmm") + len("Let me look.") + len(`{"query":"x"}`) + len(`{ "location" : "SF" }`)),
				TextBytes:   int64(len("Let me look.")),
			},
		},
		{
			name: "tool call without input",
			body: `{"id":"msg_2","type":"message","model":"m","content":[{"type":"tool_use","id":"toolu_2","name":"ping"}],"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":2}}`,
			want: &streaming.Result{
				API: streaming.APIAnthropic, MessageID: "msg_2", Model: "m", Stops: stopOf(streaming.StopToolUse),
				ToolCalls: []streaming.ToolCall{{Index: 0, Type: "tool_use", ID: "toolu_2", Name: "ping", Arguments: []byte("{}"), Complete: true}},
				Usage:     streaming.Usage{InputTokens: 1, OutputTokens: 2}, UsageSeen: true, UsageFinal: true, Done: true, OutputBytes: 2,
			},
		},
		{
			name: "context window stop keeps its raw value",
			body: `{"id":"msg_3","type":"message","model":"m","content":[],"stop_reason":"model_context_window_exceeded","usage":{"input_tokens":1,"output_tokens":2}}`,
			want: &streaming.Result{
				API: streaming.APIAnthropic, MessageID: "msg_3", Model: "m",
				Stops: []streaming.Stop{{Reason: streaming.StopMaxTokens, Raw: "model_context_window_exceeded"}},
				Usage: streaming.Usage{InputTokens: 1, OutputTokens: 2}, UsageSeen: true, UsageFinal: true, Done: true,
			},
		},
		{
			name: "unknown stop reason and no usage",
			body: `{"id":"msg_4","type":"message","model":"m","content":[{"type":"text","text":"a\u00e9"}],"stop_reason":"brand_new"}`,
			want: &streaming.Result{API: streaming.APIAnthropic, MessageID: "msg_4", Model: "m", Stops: stopOf("brand_new"), Done: true, OutputBytes: 3, TextBytes: 3},
		},
		{
			name: "null stop reason, message without a type",
			body: `{"id":"msg_5","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":0,"output_tokens":0}}`,
			want: &streaming.Result{API: streaming.APIAnthropic, MessageID: "msg_5", Model: "m", UsageSeen: true, UsageFinal: true, Done: true},
		},
		{
			name: "error body",
			body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_1"}`,
			want: &streaming.Result{
				API: streaming.APIAnthropic, Stops: stopOf(streaming.StopError),
				Errors: []streaming.ProviderError{{Type: "overloaded_error", Message: "Overloaded",
					Raw: []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_1"}`)}},
			},
		},
		{
			name: "error body with the error first",
			body: `{"error":{"message":"model: nope","type":"not_found_error"},"request_id":"req_2","type":"error"}`,
			want: &streaming.Result{
				API: streaming.APIAnthropic, Stops: stopOf(streaming.StopError),
				Errors: []streaming.ProviderError{{Type: "not_found_error", Message: "model: nope",
					Raw: []byte(`{"error":{"message":"model: nope","type":"not_found_error"},"request_id":"req_2","type":"error"}`)}},
			},
		},
		{name: "not JSON", body: `{"id":"msg_1",`, wantErr: streaming.ErrInvalidJSON},
		{name: "empty body", body: ``, wantErr: streaming.ErrInvalidJSON},
		{name: "an array", body: `[]`, wantErr: streaming.ErrInvalidJSON},
		{name: "another object", body: `{"type":"completion","completion":"hi"}`, wantErr: streaming.ErrInvalidJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := anthropic.Dialect{}.DecodeJSON([]byte(tt.body))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || got != nil {
					t.Fatalf("got %+v, %v; want error %v", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestDecodeAnthropicJSONCountsBadFields(t *testing.T) {
	body := `{"id":"m","type":"message","content":[{"text":"no type"},{"type":"tool_use","input":{}}],"stop_reason":3,"usage":{"input_tokens":"x","output_tokens":2}}`
	got, err := anthropic.Dialect{}.DecodeJSON([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if got.Unparsed != 4 || !got.Done || len(got.ToolCalls) != 1 || got.Usage.OutputTokens != 2 || len(got.Stops) != 0 {
		t.Errorf("got %+v", got)
	}
}
