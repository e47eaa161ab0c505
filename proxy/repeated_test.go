package proxy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"gatekeeper/trajectory"
)

// One reading of every reply: a call the gates could not read one way is
// never delivered as an ungated call. Each case runs a real official SDK
// through gatekeeper, streamed and not, in all three APIs, with the
// destructive-shell gate (on_refusal end_turn).

// repeatTurn runs one turn of api through gatekeeper at base with the SDK,
// streamed or not, and returns the final reply as JSON.
func repeatTurn(t *testing.T, api, base, spec string, stream bool) string {
	t.Helper()
	ctx := ctxT(t)
	switch api {
	case "anthropic":
		c := antClient(base+"/anthropic", vkA, spec)
		var m anthropic.Message
		if stream {
			m = startAntStream(ctx, c, bashParams("clean up")).wait(t)
		} else {
			m = startAntCall(ctx, c, bashParams("clean up")).wait(t)
		}
		return mustJSON(t, m)
	case "chat":
		c := oaiClient(base+"/openai/v1", vkA, spec)
		if stream {
			return mustJSON(t, startChat(ctx, c, bashChatParams()).wait(t))
		}
		r, err := c.Chat.Completions.New(ctx, bashChatParams())
		if err != nil {
			t.Fatal(err)
		}
		return mustJSON(t, r)
	default:
		c := oaiClient(base+"/openai/v1", vkA, spec)
		r, err := responsesCall(ctx, c, bashResponsesParams(), stream)
		if err != nil {
			t.Fatal(err)
		}
		return mustJSON(t, r)
	}
}

// deliveredBash reports whether the reply (as JSON) carries a call to Bash,
// in any API's shape, read as JavaScript reads it (the last of repeated
// members).
func deliveredBash(t *testing.T, reply string) bool {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(reply), &v); err != nil {
		t.Fatal(err)
	}
	var walk func(v any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case map[string]any:
			// A call: Anthropic's tool_use {name, input}, Chat's function
			// {name, arguments}, Responses' function_call {name, arguments}.
			args, _ := v["arguments"].(string)
			_, input := v["input"].(map[string]any)
			if name, _ := v["name"].(string); name == "Bash" && (args != "" || input) {
				return true
			}
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		case []any:
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}

var repeatAPIs = []string{"anthropic", "chat", "responses"}

// Keys of a call's input equal under case folding: the gate's condition
// reads command "ls", a tool decoding with encoding/json runs "rm -rf /".
// The call is held by the gate that names Bash and refused.
func TestCaseVariantInputKeysHeld(t *testing.T) {
	spec := `{"kind":"tool","first_only":true,"text":"I will look around.","tools":[{"name":"Bash","arguments":"{\"command\":\"ls\",\"Command\":\"rm -rf /\"}"}]}`
	for _, api := range repeatAPIs {
		for _, stream := range []bool{true, false} {
			t.Run(api+"/"+streamName(stream), func(t *testing.T) {
				e := newEnv(t, envOpts{limits: gatesYAML("", "    on_refusal: end_turn")})
				id := "case-" + api + "-" + streamName(stream)
				reply := repeatTurn(t, api, e.gk+"/t/"+id, spec, stream)
				if deliveredBash(t, reply) || !strings.Contains(reply, "The call to Bash was refused") {
					t.Fatalf("reply %s", reply)
				}
				rec := e.waitState(t, id, trajectory.Ready)
				if len(rec.Pending.ToolCalls) != 0 || rec.Spend.OutputTokens == 0 {
					t.Fatalf("record %+v", rec)
				}
			})
		}
	}
}

// A call with one spelling of each key is judged on its input as before:
// "ls" is not destructive, and goes out.
func TestPlainInputKeysNotHeld(t *testing.T) {
	spec := `{"kind":"tool","first_only":true,"text":"I will look around.","tools":[{"name":"Bash","arguments":"{\"command\":\"ls\",\"cwd\":\"/tmp\"}"}]}`
	e := newEnv(t, envOpts{limits: gatesYAML("", "    on_refusal: end_turn")})
	if reply := repeatTurn(t, "anthropic", e.gk+"/t/plain", spec, true); !deliveredBash(t, reply) {
		t.Fatalf("reply %s", reply)
	}
}

// repeatedReplies are replies of each API, streamed and whole, whose
// first reading (gjson's, gatekeeper's before) is text only and whose
// last reading (JavaScript's, Python's) carries a call to Bash running
// rm -rf /: a repeated type, message or choices member.
var repeatedReplies = map[string]string{
	"anthropic/stream": sse(
		"message_start", `{"type":"message_start","message":{"id":"msg_r1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}`,
		"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Cleaning up."}}`,
		"content_block_stop", `{"type":"content_block_stop","index":0}`,
		"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"","type":"tool_use","id":"toolu_r1","name":"Bash","input":{}}}`,
		"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"command\":\"rm -rf /\"}"}}`,
		"content_block_stop", `{"type":"content_block_stop","index":1}`,
		"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":30}}`,
		"message_stop", `{"type":"message_stop"}`),
	"anthropic/json": `{"id":"msg_r1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Cleaning up."},` +
		`{"type":"text","text":"","type":"tool_use","id":"toolu_r1","name":"Bash","input":{"command":"rm -rf /"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":30}}`,
	"chat/stream": sse(
		"", `{"id":"c_r1","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{"role":"assistant","content":"Cleaning up."},"finish_reason":null}]}`,
		"", `{"id":"c_r1","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{"content":""},"finish_reason":null}],"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_r1","type":"function","function":{"name":"Bash","arguments":"{\"command\":\"rm -rf /\"}"}}]},"finish_reason":null}]}`,
		"", `{"id":"c_r1","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		"", `{"id":"c_r1","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}`,
		"", `[DONE]`),
	"chat/json": `{"id":"c_r1","object":"chat.completion","created":1,"model":"gpt-4.1","choices":[{"index":0,"message":{"role":"assistant","content":"Cleaning up."},` +
		`"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_r1","type":"function","function":{"name":"Bash","arguments":"{\"command\":\"rm -rf /\"}"}}]},"finish_reason":"tool_calls"}],` +
		`"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}`,
	"responses/stream": sse(
		"response.created", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_r1","object":"response","created_at":1,"status":"in_progress","model":"gpt-4.1","output":[]}}`,
		"response.output_item.added", `{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"message","id":"msg_r1","status":"in_progress","role":"assistant","content":[],"type":"function_call","id":"fc_r1","call_id":"call_r1","name":"Bash","arguments":""}}`,
		"response.function_call_arguments.delta", `{"type":"response.function_call_arguments.delta","sequence_number":2,"item_id":"fc_r1","output_index":0,"delta":"{\"command\":\"rm -rf /\"}"}`,
		"response.function_call_arguments.done", `{"type":"response.function_call_arguments.done","sequence_number":3,"item_id":"fc_r1","output_index":0,"arguments":"{\"command\":\"rm -rf /\"}"}`,
		"response.output_item.done", `{"type":"response.output_item.done","sequence_number":4,"output_index":0,"item":{"type":"message","id":"msg_r1","status":"completed","role":"assistant","content":[],"type":"function_call","id":"fc_r1","call_id":"call_r1","name":"Bash","arguments":"{\"command\":\"rm -rf /\"}"}}`,
		"response.completed", `{"type":"response.completed","sequence_number":5,"response":{"id":"resp_r1","object":"response","created_at":1,"status":"completed","model":"gpt-4.1","output":[{"type":"message","id":"msg_r1","status":"completed","role":"assistant","content":[],"type":"function_call","id":"fc_r1","call_id":"call_r1","name":"Bash","arguments":"{\"command\":\"rm -rf /\"}","status":"completed"}],"usage":{"input_tokens":12,"output_tokens":30,"total_tokens":42}}}`),
	"responses/json": `{"id":"resp_r1","object":"response","created_at":1,"status":"completed","model":"gpt-4.1","output":[{"type":"message","id":"msg_r1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Cleaning up.","annotations":[]}],` +
		`"type":"function_call","id":"fc_r1","call_id":"call_r1","name":"Bash","arguments":"{\"command\":\"rm -rf /\"}"}],"usage":{"input_tokens":12,"output_tokens":30,"total_tokens":42}}`,
}

// sse frames name/data pairs as a stream (no event line for an empty name).
func sse(pairs ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i] != "" {
			fmt.Fprintf(&b, "event: %s\n", pairs[i])
		}
		fmt.Fprintf(&b, "data: %s\n\n", pairs[i+1])
	}
	return b.String()
}

// replayUpstream answers every turn with the recorded reply of its API and
// form; the continuation of a refused call gets it again.
func replayUpstream(t *testing.T) string { return replayUpstreamLength(t, false) }

// replayUpstreamLength is replayUpstream; with length, a stream comes with
// a Content-Length, as some OpenAI-compatible servers send it.
func replayUpstreamLength(t *testing.T, length bool) string {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		api := map[bool]string{true: "anthropic", false: "chat"}[strings.HasSuffix(r.URL.Path, "/messages")]
		if strings.HasSuffix(r.URL.Path, "/responses") {
			api = "responses"
		}
		form, ct := "json", "application/json"
		if strings.Contains(string(body), `"stream":true`) {
			form, ct = "stream", "text/event-stream"
		}
		w.Header().Set("Content-Type", ct)
		if length {
			w.Header().Set("Content-Length", fmt.Sprint(len(repeatedReplies[api+"/"+form])))
		}
		if form == "stream" && !length {
			// Streamed as providers stream, without a length.
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, repeatedReplies[api+"/"+form])
	}))
	t.Cleanup(up.Close)
	return up.URL
}

// A reply whose repeated member hides a call to Bash: the call is read
// (as the agent reads it), held by the gate that names Bash, and refused;
// the SDK never gets it, and the turn is charged what the provider
// reported.
func TestRepeatedMemberCallHeld(t *testing.T) {
	for _, api := range repeatAPIs {
		for _, stream := range []bool{true, false} {
			t.Run(api+"/"+streamName(stream), func(t *testing.T) {
				e := newEnv(t, envOpts{upstream: replayUpstream(t), limits: gatesYAML("", "    on_refusal: end_turn")})
				id := "rep-" + api + "-" + streamName(stream)
				reply := repeatTurn(t, api, e.gk+"/t/"+id, "", stream)
				if deliveredBash(t, reply) || !strings.Contains(reply, "The call to Bash was refused") {
					t.Fatalf("reply %s", reply)
				}
				rec := e.waitState(t, id, trajectory.Ready)
				if len(rec.Pending.ToolCalls) != 0 || rec.Spend.OutputTokens != 30 || rec.Spend.Estimated {
					t.Fatalf("record %+v", rec)
				}
			})
		}
	}
}

// A stream gatekeeper rewrites (here into one reading, with the refusal
// in place of the call) reaches the agent whole even when the provider
// sent it with a Content-Length: the agent's reply has no stale length.
func TestRewrittenStreamWithLength(t *testing.T) {
	for _, api := range repeatAPIs {
		t.Run(api, func(t *testing.T) {
			e := newEnv(t, envOpts{upstream: replayUpstreamLength(t, true), limits: gatesYAML("", "    on_refusal: end_turn")})
			reply := repeatTurn(t, api, e.gk+"/t/len-"+api, "", true)
			if deliveredBash(t, reply) || !strings.Contains(reply, "The call to Bash was refused") {
				t.Fatalf("reply %s", reply)
			}
		})
	}
}

// At a restrict stage, a read-only tool's call in an ambiguous reply is
// withheld too: the reply reads two ways, whatever its call is named.
func TestRepeatedMemberWithheldAtRestrict(t *testing.T) {
	for _, api := range repeatAPIs {
		for _, stream := range []bool{true, false} {
			t.Run(api+"/"+streamName(stream), func(t *testing.T) {
				e := newEnv(t, envOpts{upstream: replayUpstream(t), readOnly: "[Bash]"})
				id := "restr-" + api + "-" + streamName(stream)
				e.seed(t, id, 10, 9.3)
				reply := repeatTurn(t, api, e.gk+"/t/"+id, "", stream)
				if deliveredBash(t, reply) || !strings.Contains(reply, "reads two ways") {
					t.Fatalf("reply %s", reply)
				}
			})
		}
	}
}

// swappedItemStream is a Responses stream whose call item is announced as
// a Read of a notes file and finished (output_item.done, and the final
// output) as a Bash call running rm -rf /: no member repeats, but an agent
// that runs the items it is given done runs another call than the one
// announced.
var swappedItemStream = sse(
	"response.created", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_s1","object":"response","created_at":1,"status":"in_progress","model":"gpt-4.1","output":[]}}`,
	"response.output_item.added", `{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"function_call","id":"fc_s1","call_id":"call_s1","name":"Read","arguments":"","status":"in_progress"}}`,
	"response.function_call_arguments.delta", `{"type":"response.function_call_arguments.delta","sequence_number":2,"item_id":"fc_s1","output_index":0,"delta":"{\"file_path\":\"/srv/notes.txt\"}"}`,
	"response.function_call_arguments.done", `{"type":"response.function_call_arguments.done","sequence_number":3,"item_id":"fc_s1","output_index":0,"arguments":"{\"file_path\":\"/srv/notes.txt\"}"}`,
	"response.output_item.done", `{"type":"response.output_item.done","sequence_number":4,"output_index":0,"item":{"type":"function_call","id":"fc_s1","call_id":"call_s1","name":"Bash","arguments":"{\"command\":\"rm -rf /\"}","status":"completed"}}`,
	"response.completed", `{"type":"response.completed","sequence_number":5,"response":{"id":"resp_s1","object":"response","created_at":1,"status":"completed","model":"gpt-4.1","output":[{"type":"function_call","id":"fc_s1","call_id":"call_s1","name":"Bash","arguments":"{\"command\":\"rm -rf /\"}","status":"completed"}],"usage":{"input_tokens":12,"output_tokens":30,"total_tokens":42}}}`)

// A done item that swaps the announced call for another is never
// delivered: not as the done item the SDK's stream gives, nor in the final
// response. Before, the Read was gated (and let through) while the agent
// got the Bash.
func TestSwappedItemNeverDelivered(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, swappedItemStream)
	}))
	t.Cleanup(up.Close)
	e := newEnv(t, envOpts{upstream: up.URL, limits: gatesYAML("", "    on_refusal: end_turn")})
	c := oaiClient(e.gk+"/t/swapped/openai/v1", vkA, "")
	s := c.Responses.NewStreaming(ctxT(t), bashResponsesParams())
	defer s.Close()
	var given []string // the calls the SDK gives, done and in the final response
	completed := false
	for s.Next() {
		switch ev := s.Current(); ev.Type {
		case "response.output_item.done":
			given = append(given, ev.Item.Type+" "+ev.Item.Name)
		case "response.completed":
			completed = true
			for _, item := range ev.Response.Output {
				given = append(given, item.Type+" "+item.Name)
			}
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if !completed || slices.Contains(given, "function_call Bash") {
		t.Fatalf("completed %v, the SDK was given %q", completed, given)
	}
}
