package streaming_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
)

const refusedResult = `{"status":"REFUSED","reason":"APPROVAL_DENIED","call":"Bash","message":"denied by carol"}`

// TestContinuation continues each API's mixed reply (text, a Bash call, a
// Read call), streamed and whole, after a real agent's request: the
// conversation gains the reply and one result per call, and nothing else
// of the request changes.
func TestContinuation(t *testing.T) {
	requests := map[streaming.API][]string{
		streaming.APIAnthropic: {"anthropic-claude-code-turn1.json", "anthropic-claude-code-turn2.json"},
		streaming.APIChat:      {"chat-openai-sdk-parallel-tools.json"},
		streaming.APIResponses: {"responses-codex-exec.json", "responses-previous-response-id.json", "string-input"},
	}
	stringInput := []byte(`{"model":"gpt-5","input":"list the files","stream":true,"tools":[{"type":"function","name":"Bash"}]}`)
	for _, api := range escrowAPIs {
		stream := fixturetest.ReadFile(t, filterTestdata, filterPrefix(api)+"text-refused-allowed.sse")
		body, err := dialects[api].AssembleJSON(stream)
		if err != nil {
			t.Fatal(err)
		}
		res, _ := mustDecode(t, api, stream)
		bash, _ := callByName(res.ToolCalls, "Bash")
		results := map[string][]byte{bash.ID: []byte(refusedResult), "": []byte(`{"status":"REFUSED","reason":"STALE"}`)}
		for _, name := range requests[api] {
			req := stringInput
			if name != "string-input" {
				req = fixturetest.ReadFile(t, "testdata/requests", name)
			}
			for _, streamed := range []bool{true, false} {
				reply := body
				if streamed {
					reply = stream
				}
				out, err := dialects[api].Continuation(req, reply, streamed, results)
				if err != nil {
					t.Fatalf("%s %s: %v", api, name, err)
				}
				checkContinuation(t, api, apis[api].conversation, req, out, body, res.ClientToolCalls(), results)
			}
		}
	}
}

func checkContinuation(t *testing.T, api streaming.API, key string, req, out, reply []byte, calls []streaming.ToolCall, results map[string][]byte) {
	t.Helper()
	if !gjson.ValidBytes(out) {
		t.Fatalf("not JSON: %s", out)
	}
	// Every other member is the same bytes.
	gjson.ParseBytes(req).ForEach(func(k, v gjson.Result) bool {
		if k.Str != key && gjson.GetBytes(out, gjson.Escape(k.Str)).Raw != v.Raw {
			t.Errorf("%s: member %s changed", api, k.Str)
		}
		return true
	})
	// The conversation is the same up to its end.
	before, after := gjson.GetBytes(req, key), gjson.GetBytes(out, key).Array()
	prior := before.Array()
	if before.Type == gjson.String {
		if len(after) == 0 || after[0].Get("content").Raw != before.Raw {
			t.Fatalf("%s: the input string is not the first message: %s", api, out)
		}
		prior = after[:1]
	}
	if len(after) < len(prior) {
		t.Fatalf("%s: the conversation shrank", api)
	}
	if before.Type != gjson.String {
		end := strings.LastIndexByte(before.Raw, ']')
		if !bytes.Contains(out, []byte(strings.TrimRight(before.Raw[:end], " \n\t"))) {
			t.Errorf("%s: the conversation's bytes changed", api)
		}
	}
	added := after[len(prior):]
	got := apis[api].continued(t, added, gjson.ParseBytes(reply)) // the results added, in order
	if len(got) != len(calls) {
		t.Fatalf("%s: %d results for %d calls", api, len(got), len(calls))
	}
	for i, tc := range calls {
		want, ok := results[tc.ID]
		if !ok {
			want = results[""]
		}
		id := got[i].Get("tool_use_id").Str + got[i].Get("tool_call_id").Str + got[i].Get("call_id").Str
		text := got[i].Get("content").Str + got[i].Get("output").Str
		if id != tc.ID || text != string(want) {
			t.Errorf("%s: result %d is %s %q, want %s %q", api, i, id, text, tc.ID, want)
		}
	}
	parsed, err := dialects[api].ParseRequest(out)
	if err != nil {
		t.Fatal(err)
	}
	orig, _ := dialects[api].ParseRequest(req)
	if parsed.Stream != orig.Stream || len(parsed.ToolResults) != len(calls) {
		t.Errorf("%s: stream %v (want %v), %d tool results", api, parsed.Stream, orig.Stream, len(parsed.ToolResults))
	}
}

func TestContinuationErrors(t *testing.T) {
	req := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	reply := []byte(`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{}}],"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}`)
	tests := []struct {
		name    string
		api     streaming.API
		req     []byte
		reply   []byte
		results map[string][]byte
		want    error
	}{
		{"no result", streaming.APIAnthropic, req, reply, map[string][]byte{"toolu_2": []byte("x")}, streaming.ErrNoToolResult},
		{"request not JSON", streaming.APIAnthropic, []byte(`{"messages":[`), reply, map[string][]byte{"": nil}, streaming.ErrInvalidJSON},
		{"no messages", streaming.APIAnthropic, []byte(`{"model":"m"}`), reply, map[string][]byte{"": nil}, streaming.ErrNoConversation},
		{"reply not JSON", streaming.APIAnthropic, req, []byte(`{"content":[`), map[string][]byte{"": nil}, streaming.ErrInvalidJSON},
		{"chat string messages", streaming.APIChat, []byte(`{"messages":"hi"}`), []byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}]}`), nil, streaming.ErrNoConversation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := dialects[tt.api].Continuation(tt.req, tt.reply, false, tt.results)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %s, %v; want %v", out, err, tt.want)
			}
		})
	}
}
