package mockprovider

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/internal/fixturetest"
)

func readFixture(t *testing.T, name string) []sseEvent {
	t.Helper()
	f, err := os.Open(filepath.Join(fixturetest.Path(), name))
	if err != nil {
		t.Skipf("real recordings not available: %v", err)
	}
	defer f.Close()
	events, err := readAllEvents(f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return events
}

func keys(v gjson.Result) []string {
	var out []string
	v.ForEach(func(k, _ gjson.Result) bool {
		out = append(out, k.String())
		return true
	})
	return out
}

// shapeKey names an event's shape: its type plus the type of the block,
// delta, item or part it carries.
func shapeKey(data string) string {
	root := gjson.Parse(data)
	sub := ""
	for _, p := range []string{"delta.type", "content_block.type", "item.type", "part.type"} {
		if v := root.Get(p); v.Exists() {
			sub = v.String()
			break
		}
	}
	return root.Get("type").String() + "/" + sub
}

// shapes maps each event shape to the key order of the objects at paths.
func shapes(events []sseEvent, key func(sseEvent) string, paths []string) map[string]map[string][]string {
	out := map[string]map[string][]string{}
	for _, ev := range events {
		if ev.data == "[DONE]" {
			continue
		}
		k := key(ev)
		if _, seen := out[k]; seen {
			continue
		}
		root := gjson.Parse(ev.data)
		m := map[string][]string{"": keys(root)}
		for _, p := range paths {
			if v := root.Get(p); v.IsObject() {
				m[p] = keys(v)
			}
		}
		out[k] = m
	}
	return out
}

func TestShapesMatchRecordings(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		api     API
		spec    string
		body    string
		key     func(sseEvent) string
		paths   []string
		nested  bool // compare only the objects at paths, not the event's top level
	}{
		{
			name: "anthropic thinking then text", fixture: "anthropic-thinking-signature.sse", api: APIAnthropic,
			spec:  `{"thinking":"a b c","text":"d e f"}`,
			key:   func(ev sseEvent) string { return shapeKey(ev.data) },
			paths: []string{"message", "message.usage", "message.usage.cache_creation", "content_block", "delta", "usage"},
		},
		{
			name: "anthropic tool use", fixture: "anthropic-tool-use-input-json-delta.sse", api: APIAnthropic,
			spec:  `{"kind":"tool","text":"x","tools":[{"name":"get_weather","input":{"location":"SF"}}]}`,
			key:   func(ev sseEvent) string { return shapeKey(ev.data) },
			paths: []string{"content_block", "delta"},
		},
		{
			name: "chat parallel tool calls", fixture: "openai-chat-parallel-tool-calls-obfuscation.sse", api: APIChat,
			spec: `{"kind":"tool","tools":[{"name":"a","input":{}},{"name":"b","input":{}}]}`,
			key: func(ev sseEvent) string {
				root := gjson.Parse(ev.data)
				switch {
				case root.Get("choices.#").Int() == 0:
					return "usage"
				case root.Get("choices.0.finish_reason").String() != "":
					return "finish"
				case root.Get("choices.0.delta.role").Exists():
					return "role"
				case root.Get("choices.0.delta.tool_calls.0.id").Exists():
					return "tool start"
				}
				return "tool args"
			},
			paths: []string{"choices.0", "choices.0.delta", "choices.0.delta.tool_calls.0", "usage",
				"usage.prompt_tokens_details", "usage.completion_tokens_details"},
		},
		{
			name: "responses text", fixture: "openai-responses-cached-tokens.sse", api: APIResponses,
			spec: `{"text":"2, 3, 4"}`,
			body: `{"model":"gpt-4o","stream":true,"stream_options":{"include_obfuscation":false},"input":"count"}`,
			key:  func(ev sseEvent) string { return shapeKey(ev.data) },
			// A 2025-07 recording: its response object predates
			// prompt_cache_key and safety_identifier, so only its parts.
			paths: []string{"response.usage", "item", "part"},
		},
		{
			name: "chat refusal", fixture: "openai-chat-refusal-deltas.sse", api: APIChat,
			spec: `{"kind":"refusal"}`,
			body: `{"model":"gpt-4o","stream":true,"stream_options":{"include_obfuscation":false},"messages":[{"role":"user","content":"x"}]}`,
			key: func(ev sseEvent) string {
				root := gjson.Parse(ev.data)
				switch {
				case root.Get("choices.0.finish_reason").String() != "":
					return "finish"
				case root.Get("choices.0.delta.role").Exists():
					return "role"
				}
				return "refusal"
			},
			// A 2024 recording, from before service_tier on every chunk.
			paths:  []string{"choices.0", "choices.0.delta"},
			nested: true,
		},
		{
			name: "responses error then failed", fixture: "openai-responses-error-then-failed.sse", api: APIResponses,
			spec:  `{"kind":"error_midstream"}`,
			key:   func(ev sseEvent) string { return shapeKey(ev.data) },
			paths: []string{"error", "response", "response.error"},
		},
		{
			name: "responses function call", fixture: "openai-responses-reasoning-then-function-call.sse", api: APIResponses,
			spec:  `{"kind":"tool","tools":[{"name":"calculator","input":{"a":1}}]}`,
			key:   func(ev sseEvent) string { return shapeKey(ev.data) },
			paths: []string{"item", "response"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			real := shapes(readFixture(t, tt.fixture), tt.key, tt.paths)
			_, url := newMock(t, Options{})
			tb := turnBodies[tt.api]
			body := orDefault(tt.body, tb.body)
			events, err := readAllEvents(post(t, testContext(t), url+tb.path, body, HeaderTurn, tt.spec).Body)
			if err != nil {
				t.Fatal(err)
			}
			mock := shapes(events, tt.key, tt.paths)
			compared := 0
			for k, realPaths := range real {
				mockPaths, ok := mock[k]
				if !ok {
					continue // a shape this turn does not produce (e.g. a reasoning item)
				}
				for p, want := range realPaths {
					if p == "" && tt.nested {
						continue
					}
					got, ok := mockPaths[p]
					if !ok {
						t.Errorf("%s %q: mock has no object at %q (real: %v)", k, p, p, want)
						continue
					}
					compared++
					if !slices.Equal(got, want) {
						t.Errorf("%s at %q:\n mock %s\n real %s", k, p, strings.Join(got, ","), strings.Join(want, ","))
					}
				}
			}
			t.Logf("%d objects compared", compared)
			if compared < 3 {
				t.Errorf("only %d shapes compared", compared)
			}
		})
	}
}
