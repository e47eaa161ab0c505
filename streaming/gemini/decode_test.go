package gemini_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gatekeeper/internal/streamtest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/gemini"
)

// testdata holds the decoder's sample streams, in the API's own framing
// (CRLF between events, as Google sends them, in some).
const testdata = "testdata"

func read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecode(t *testing.T) {
	tests := []struct {
		file      string
		stops     string // reason/raw of each stop
		calls     string // name=id of each call; "derived" for a derived id
		usage     streaming.Usage
		noUsage   bool
		done      bool
		truncated bool
		errors    int
		unparsed  int
		textBytes int64
	}{
		{file: "text.sse", stops: "end_turn/STOP", done: true, textBytes: 21,
			usage: streaming.Usage{InputTokens: 57, CachedInputTokens: 200, OutputTokens: 38, ReasoningTokens: 30}},
		{file: "call.sse", stops: "tool_use/STOP", calls: "run_shell_command=derived", done: true,
			usage: streaming.Usage{InputTokens: 29, OutputTokens: 212, ReasoningTokens: 202}},
		{file: "two-calls-finish.sse", stops: "tool_use/STOP", calls: "read_file=derived run_shell_command=own-id-7", done: true, textBytes: 18,
			usage: streaming.Usage{InputTokens: 100, OutputTokens: 40}},
		{file: "max-tokens.sse", stops: "max_tokens/MAX_TOKENS", done: true, textBytes: 13,
			usage: streaming.Usage{InputTokens: 10, OutputTokens: 16}},
		{file: "prompt-blocked.sse", stops: "content_filter/promptFeedback:PROHIBITED_CONTENT", done: true,
			usage: streaming.Usage{InputTokens: 12}},
		{file: "error-midstream.sse", errors: 1, noUsage: true, textBytes: 3},
		{file: "truncated.sse", truncated: true, noUsage: true, unparsed: 1, textBytes: 3},
		// Vertex's streamed arguments are not assembled: the parts count as
		// unparsed, no call is read from them.
		{file: "vertex-partial-args.sse", stops: "end_turn/STOP", done: true, unparsed: 3,
			usage: streaming.Usage{InputTokens: 26, OutputTokens: 155, ReasoningTokens: 132}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			res := streamtest.MustDecode(t, gemini.Dialect{}, read(t, tc.file))
			var stops, calls []string
			for _, s := range res.Stops {
				stops = append(stops, string(s.Reason)+"/"+s.Raw)
			}
			for _, c := range res.ToolCalls {
				id := c.ID
				if strings.HasPrefix(id, "gk-call-") {
					id = "derived"
				}
				calls = append(calls, c.Name+"="+id)
				if !c.Complete || c.Type != gemini.CallType {
					t.Errorf("call %+v", c)
				}
			}
			if got := strings.Join(stops, " "); got != tc.stops {
				t.Errorf("stops = %q, want %q", got, tc.stops)
			}
			if got := strings.Join(calls, " "); got != tc.calls {
				t.Errorf("calls = %q, want %q", got, tc.calls)
			}
			if res.UsageSeen == tc.noUsage || res.Usage != tc.usage {
				t.Errorf("usage = %+v (seen %v), want %+v", res.Usage, res.UsageSeen, tc.usage)
			}
			if res.Done != tc.done || res.Truncated != tc.truncated || len(res.Errors) != tc.errors || res.Unparsed != tc.unparsed {
				t.Errorf("done %v truncated %v errors %d unparsed %d", res.Done, res.Truncated, len(res.Errors), res.Unparsed)
			}
			if res.TextBytes != tc.textBytes {
				t.Errorf("text bytes = %d, want %d", res.TextBytes, tc.textBytes)
			}
			if tc.file != "truncated.sse" {
				streamtest.CheckSplitInvariance(t, gemini.Dialect{}, read(t, tc.file), 1)
			}
		})
	}
}

// TestCallIDs: a call that names no id gets one derived from its reply
// and its place, the same read from the stream, from the body the stream
// assembles into and from that body rendered again, and another one in
// another reply.
func TestCallIDs(t *testing.T) {
	d := gemini.Dialect{}
	stream := read(t, "two-calls-finish.sse")
	res := streamtest.MustDecode(t, d, stream)
	body, err := d.AssembleJSON(stream)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := d.DecodeJSON(body)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := d.RenderSSE(body)
	if err != nil {
		t.Fatal(err)
	}
	again := streamtest.MustDecode(t, d, rendered)
	if len(res.ToolCalls) != 2 {
		t.Fatalf("%d calls", len(res.ToolCalls))
	}
	for i, c := range res.ToolCalls {
		if whole.ToolCalls[i].ID != c.ID || again.ToolCalls[i].ID != c.ID {
			t.Errorf("call %d: ids %q, %q, %q", i, c.ID, whole.ToolCalls[i].ID, again.ToolCalls[i].ID)
		}
	}
	other := strings.ReplaceAll(string(stream), "resp-two-1", "resp-two-2")
	if o := streamtest.MustDecode(t, d, []byte(other)); o.ToolCalls[0].ID == res.ToolCalls[0].ID {
		t.Errorf("two replies share the call id %q", o.ToolCalls[0].ID)
	}
}

func TestDecodeJSON(t *testing.T) {
	d := gemini.Dialect{}
	body := `{
  "candidates": [
    {
      "content": {"parts": [{"text": "hi"}, {"functionCall": {"name": "ls", "args": {}}}], "role": "model"},
      "finishReason": "STOP",
      "index": 0
    }
  ],
  "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 3, "toolUsePromptTokenCount": 5, "totalTokenCount": 15},
  "modelVersion": "gemini-2.5-pro",
  "responseId": "abc"
}`
	res, err := d.DecodeJSON([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Done || res.StopReason() != streaming.StopToolUse || len(res.ToolCalls) != 1 || res.Model != "gemini-2.5-pro" || res.MessageID != "abc" {
		t.Errorf("res = %+v", res)
	}
	if want := (streaming.Usage{InputTokens: 12, OutputTokens: 3}); res.Usage != want {
		t.Errorf("usage = %+v, want %+v", res.Usage, want)
	}
	res, err = d.DecodeJSON([]byte(`{"error":{"code":429,"message":"Resource exhausted","status":"RESOURCE_EXHAUSTED"}}`))
	if err != nil || len(res.Errors) != 1 || res.Errors[0].Type != "RESOURCE_EXHAUSTED" || res.Errors[0].Message != "Resource exhausted" {
		t.Errorf("error body: %+v, %v", res, err)
	}
	if _, err := d.DecodeJSON([]byte(`[{"candidates":[]}]`)); err == nil {
		t.Error("a JSON array decoded as a reply")
	}
}

// TestRepeatedMember: a chunk that repeats a member is read as the one
// reading every reader shares (the rewrite of streaming.ValidJSON: the
// last name, as the agent's JavaScript reads it), and marks the reply
// ambiguous.
func TestRepeatedMember(t *testing.T) {
	stream := "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"read_file\",\"name\":\"run_shell_command\",\"args\":{}}}]},\"finishReason\":\"STOP\"}],\"responseId\":\"r\"}\n\n"
	res := streamtest.MustDecode(t, gemini.Dialect{}, []byte(stream))
	if !res.Ambiguous || len(res.ToolCalls) != 1 || res.ToolCalls[0].Name != "run_shell_command" {
		t.Fatalf("ambiguous %v, calls %+v", res.Ambiguous, res.ToolCalls)
	}
}

func FuzzGemini(f *testing.F) {
	streamtest.AddStreamSeeds(f, testdata)
	f.Add([]byte("data: {\"candidates\":null,\"error\":false}\n\n"), uint64(7))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		streamtest.CheckDecodeInvariants(t, gemini.Dialect{}, data, seed)
	})
}

func FuzzGeminiJSON(f *testing.F) {
	f.Add([]byte(`{"candidates":[{"content":{"parts":[{"functionCall":{"name":"x","args":{}}}]},"finishReason":"STOP"}]}`))
	f.Add([]byte(`{"error":{"code":400,"message":"bad","status":"INVALID_ARGUMENT"}}`))
	f.Add([]byte(`{"promptFeedback":{"blockReason":"SAFETY"}}`))
	f.Fuzz(func(t *testing.T, body []byte) { streamtest.CheckDecodeJSONInvariants(t, gemini.Dialect{}, body) })
}
