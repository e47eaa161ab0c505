package streaming_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/anthropic"
	"gatekeeper/streaming/chat"
	"gatekeeper/streaming/responses"
)

// The tests of the streaming tree that span the three APIs run here, in an
// external package, and reach each API through its Dialect as the proxy
// does: dialects is their table of the dialects, as the proxy's is.
var dialects = map[streaming.API]streaming.Dialect{
	streaming.APIAnthropic: anthropic.Dialect{},
	streaming.APIChat:      chat.Dialect{},
	streaming.APIResponses: responses.Dialect{},
}

// apiFacts is what those tests know of one API apart from the code under
// test, read with gjson: the names of its sample streams, the shapes of its
// requests and replies, the checks only its wire format calls for, and the
// builders of its random replies and large requests. A test takes an API's
// facts from apis and never branches on the API.
type apiFacts struct {
	// prefix and holdPrefix begin the names of its streams in the
	// filter's testdata and of those held calls are tried on.
	prefix, holdPrefix string

	// conversation is the request member holding the conversation; with
	// stringConversation it may be a string, which a notice turns into
	// [{"role":"user","content":<the string>}, notice].
	conversation       string
	stringConversation bool
	// notice is a budget notice holding text as the conversation's item,
	// decoded.
	notice func(text string) any
	// toolNames reads the names of a tools list as the provider knows
	// them; functions says a legacy "functions" list names tools too, and
	// namespaces that a tool may be a namespace of others.
	toolNames             func(tools gjson.Result) []string
	functions, namespaces bool
	// benchBody builds a request of about size bytes: a tool list, then a
	// long tool-calling conversation.
	benchBody func(size int) []byte
	// streamOptions says a request may ask a stream for its usage
	// (Request.IncludeUsage); callOutputs that a tool result may be any
	// *_call_output item.
	streamOptions, callOutputs bool

	// objectInput says a call's input is an object in a whole reply, so
	// that one cut short has no whole reply that holds it.
	objectInput bool
	// sharedCallIDs are the call ids a stream gives to several items, by
	// item; nil where a call's id is written once per call.
	sharedCallIDs func(t *testing.T, data []byte) map[string]map[string]bool
	// generate is a random reply.
	generate func(g *filterGen) []byte
	// callEvent tells whether an event carries a client call and whether
	// it carries the reply's stop; blocks keeps what earlier events said.
	callEvent func(js gjson.Result, blocks map[int64]bool) (call, stop bool)
	// continued checks the items a continuation added to the conversation
	// for reply, and returns the tool results among them.
	continued func(t *testing.T, added []gjson.Result, reply gjson.Result) []gjson.Result
	// refusedInBody checks where a filtered whole reply out gives the
	// refusal of the call refused: wantText is the message text.
	refusedInBody func(t *testing.T, out []byte, refused streaming.ToolCall, refusal, wantText string)
	// refusedInStream checks where a filtered stream out of in gives the
	// refusal of the call refused, and how it numbers what follows.
	refusedInStream func(t *testing.T, in, out []byte, refused streaming.ToolCall, delivered []streaming.ToolCall, refusal string)
	// order checks that a filtered stream out of in numbers its blocks,
	// items or events in the order the client gets them.
	order func(t *testing.T, in, out []byte)
	// textWaits says text after a held call waits for it, rather than
	// taking its place.
	textWaits bool
	// numbered says the stream numbers its events (sequence_number).
	numbered bool
	// assemblesAnyEnd says AssembleJSON gives the reply of a stream that
	// did not stop cleanly too (the terminal event's).
	assemblesAnyEnd bool
	// cutIsNoCall says the decoder takes a call the output limit cut short
	// for no call at all (an incomplete item).
	cutIsNoCall bool
	// textFromItems says the decoder reads a reply's text from whole
	// items, so that a rendered stream's text deltas need not match the
	// original's.
	textFromItems bool
}

var apis = map[streaming.API]apiFacts{
	streaming.APIAnthropic: {
		prefix: "anthropic-", holdPrefix: "anthropic-hold-",
		conversation: "messages",
		notice: func(text string) any {
			return map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": text}}}
		},
		toolNames: func(tools gjson.Result) []string {
			return eachTool(tools, func(names []string, tool gjson.Result) []string {
				return appendNonEmpty(names, tool.Get("name"), tool.Get("type"))
			})
		},
		benchBody:   func(size int) []byte { return claudeCodeBody(size / 3300) },
		objectInput: true,
		generate:    (*filterGen).anthropic,
		callEvent: func(js gjson.Result, blocks map[int64]bool) (call, stop bool) {
			switch js.Get("type").Str {
			case "content_block_start":
				if js.Get("content_block.type").Str == "tool_use" {
					blocks[js.Get("index").Int()] = true
				}
				return blocks[js.Get("index").Int()], false
			case "content_block_delta", "content_block_stop":
				return blocks[js.Get("index").Int()], false
			case "message_delta":
				return false, js.Get("delta.stop_reason").Type == gjson.String
			}
			return false, false
		},
		continued: func(t *testing.T, added []gjson.Result, reply gjson.Result) []gjson.Result {
			if len(added) != 2 || added[0].Get("role").Str != "assistant" || added[0].Get("content").Raw != reply.Get("content").Raw {
				t.Fatalf("anthropic: added %v", added)
			}
			return added[1].Get("content").Array()
		},
		refusedInBody: func(t *testing.T, out []byte, refused streaming.ToolCall, refusal, _ string) {
			if gjson.GetBytes(out, fmt.Sprintf("content.%d.text", refused.Index)).Str != refusal {
				t.Errorf("no refusal at content[%d]: %s", refused.Index, out)
			}
		},
		refusedInStream: func(t *testing.T, _, out []byte, refused streaming.ToolCall, _ []streaming.ToolCall, refusal string) {
			checkAnthropicBlocks(t, out, refused.Index, refusal)
		},
		order:     func(t *testing.T, _, out []byte) { checkBlockOrder(t, out) },
		textWaits: true,
	},
	streaming.APIChat: {
		prefix: "chat-", holdPrefix: "chat-hold-",
		conversation: "messages",
		notice:       func(text string) any { return map[string]any{"role": "user", "content": text} },
		toolNames: func(tools gjson.Result) []string {
			return eachTool(tools, func(names []string, tool gjson.Result) []string {
				typ := tool.Get("type")
				def := tool.Get("function")
				if typ.Type == gjson.String && typ.Str == "custom" {
					def = tool.Get("custom")
				}
				name := gjson.Result{}
				if def.IsObject() {
					name = def.Get("name")
				}
				return appendNonEmpty(names, name, tool.Get("name"), typ)
			})
		},
		functions: true, streamOptions: true,
		benchBody: func(size int) []byte {
			return openAIBenchBody(size, "messages",
				func(name string, params any) any {
					return map[string]any{"type": "function", "function": map[string]any{"name": name, "parameters": params}}
				},
				func(id, output string) []any {
					return []any{
						map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": id, "type": "function", "function": map[string]any{"name": "Read", "arguments": `{"path":"lexer.go"}`}}}},
						map[string]any{"role": "tool", "tool_call_id": id, "content": output},
					}
				}, nil)
		},
		generate: (*filterGen).chat,
		callEvent: func(js gjson.Result, _ map[int64]bool) (call, stop bool) {
			return js.Get("choices.#.delta.tool_calls").Raw != "[]" && js.Get("choices.#.delta.tool_calls").Exists(),
				js.Get(`choices.#(finish_reason!=null)`).Exists()
		},
		continued: func(t *testing.T, added []gjson.Result, reply gjson.Result) []gjson.Result {
			if added[0].Get("role").Str != "assistant" || added[0].Get("tool_calls").Raw != reply.Get("choices.0.message.tool_calls").Raw {
				t.Fatalf("chat: added %v", added)
			}
			return added[1:]
		},
		refusedInBody: func(t *testing.T, out []byte, _ streaming.ToolCall, _, wantText string) {
			if got := gjson.GetBytes(out, "choices.0.message.content").Str; got != wantText {
				t.Errorf("content %q, want %q", got, wantText)
			}
		},
		refusedInStream: func(t *testing.T, _, _ []byte, _ streaming.ToolCall, delivered []streaming.ToolCall, _ string) {
			if len(delivered) > 0 && delivered[0].Index != 0 {
				t.Errorf("the allowed call has index %d, want 0: the refused one is gone", delivered[0].Index)
			}
		},
		order: func(*testing.T, []byte, []byte) {}, // nothing in a Chat stream is numbered
	},
	streaming.APIResponses: {
		prefix: "responses-", holdPrefix: "responses-hold-",
		conversation: "input", stringConversation: true,
		notice: func(text string) any {
			return map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": text}}}
		},
		toolNames: func(tools gjson.Result) []string {
			return eachTool(tools, func(names []string, tool gjson.Result) []string {
				switch typ := tool.Get("type"); {
				case typ.Type == gjson.String && typ.Str == "namespace":
					for _, f := range tool.Get("tools").Array() {
						if f.IsObject() {
							names = appendNonEmpty(names, f.Get("name"), f.Get("type"))
						}
					}
					return names
				case typ.Type == gjson.String && (typ.Str == "function" || typ.Str == "custom"):
					return appendNonEmpty(names, tool.Get("name"))
				default:
					return appendNonEmpty(names, typ)
				}
			})
		},
		namespaces: true, callOutputs: true,
		benchBody: func(size int) []byte {
			return openAIBenchBody(size, "input",
				func(name string, params any) any {
					return map[string]any{"type": "function", "name": name, "parameters": params}
				},
				func(id, output string) []any {
					return []any{
						map[string]any{"type": "function_call", "call_id": id, "name": "Read", "arguments": `{"path":"lexer.go"}`},
						map[string]any{"type": "function_call_output", "call_id": id, "output": output},
					}
				}, map[string]any{"type": "web_search"})
		},
		sharedCallIDs: responsesCallIDs,
		generate:      (*filterGen).responses,
		callEvent: func(js gjson.Result, _ map[int64]bool) (call, stop bool) {
			typ := js.Get("type").Str
			return strings.HasPrefix(typ, "response.function_call_arguments.") ||
					strings.HasPrefix(typ, "response.output_item.") && js.Get("item.type").Str == "function_call",
				typ == "response.completed" || typ == "response.incomplete"
		},
		continued: func(t *testing.T, added []gjson.Result, reply gjson.Result) []gjson.Result {
			items := reply.Get("output").Array()
			for i, it := range items {
				if i >= len(added) || added[i].Raw != it.Raw {
					t.Fatalf("responses: output item %d not added as received", i)
				}
			}
			return added[len(items):]
		},
		refusedInBody: func(t *testing.T, out []byte, refused streaming.ToolCall, refusal, _ string) {
			item := gjson.GetBytes(out, fmt.Sprintf("output.%d", refused.Index))
			if item.Get("id").Str != "msg_"+refused.ID || item.Get("content.0.text").Str != refusal {
				t.Errorf("no message at output[%d]: %s", refused.Index, out)
			}
		},
		refusedInStream: func(t *testing.T, in, out []byte, refused streaming.ToolCall, _ []streaming.ToolCall, refusal string) {
			checkSequenceNumbers(t, in, out)
			checkResponsesOutput(t, out, refused, refusal)
		},
		order: func(t *testing.T, in, out []byte) {
			checkSequenceNumbers(t, in, out)
			checkOutputOrder(t, out)
		},
		numbered: true, assemblesAnyEnd: true, cutIsNoCall: true, textFromItems: true,
	},
}

// requestFileAPI is the API of a request file of the testdata, by the
// prefix of its name.
func requestFileAPI(tb testing.TB, name string) streaming.API {
	tb.Helper()
	for api, f := range apis {
		if strings.HasPrefix(filepath.Base(name), f.prefix) {
			return api
		}
	}
	tb.Fatalf("%s: no API's request", name)
	return ""
}

// eachTool folds add over the tool objects of tools.
func eachTool(tools gjson.Result, add func(names []string, tool gjson.Result) []string) []string {
	var names []string
	for _, tool := range tools.Array() {
		if tool.IsObject() {
			names = add(names, tool)
		}
	}
	return names
}

// openAIBenchBody builds a request of an OpenAI API of about size bytes
// with Claude Code's tools, as tool makes them, and Read round trips, as
// roundTrip makes them, in the member conversation; extra, when set, is a
// hosted tool added after the fourth.
func openAIBenchBody(size int, conversation string, tool func(name string, params any) any, roundTrip func(id, output string) []any, extra any) []byte {
	output := strings.Repeat("    12\tfunc (p *Parser) next() (Token, error) {\n\t\treturn p.lex.scan(\"\\n\")\n", 28)
	var conv []any
	var tools []any
	for i, name := range claudeCodeTools {
		params := map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}
		tools = append(tools, tool(name, params))
		if i == 3 && extra != nil {
			tools = append(tools, extra)
		}
	}
	for i := 0; len(conv)/2*(len(output)+200) < size; i++ {
		conv = append(conv, roundTrip(fmt.Sprintf("call_%020d", i), output)...)
	}
	req := map[string]any{"model": "gpt-5", "stream": true, "tools": tools, "tool_choice": "auto", "parallel_tool_calls": true}
	req[conversation] = conv
	b, err := json.Marshal(req)
	if err != nil {
		panic(err)
	}
	return b
}
