package proxy_test

import (
	"encoding/json"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"gatekeeper/trajectory"
)

// The official SDKs are what real agents use: a reply they accumulate
// through gatekeeper must equal the one they get from the provider
// directly. The provider here is two identically seeded mocks, one behind
// gatekeeper and one reached directly.

var sdkTurns = []struct {
	name, spec string
	stop       string // the record's last_stop_reason after the turn
	waiting    bool   // the record waits for tool results
}{
	{"text", `{"kind":"text","text":"Here is the answer you asked for."}`, "end_turn", false},
	{"parallel tools", `{"kind":"tool","parallel":2}`, "tool_use", true},
	{"thinking then tool", `{"kind":"tool","thinking":"I should look first."}`, "tool_use", true},
	{"max tokens", `{"kind":"max_tokens"}`, "max_tokens", false},
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func checkRecord(t *testing.T, e *env, id, stop string, waiting bool) {
	t.Helper()
	var rec *trajectory.Record
	waitFor(t, "the turn recorded", func() bool { rec = e.record(t, id); return rec.Turns == 1 })
	want := trajectory.Ready
	if waiting {
		want = trajectory.WaitingTool
	}
	if rec.State != want || rec.LastStopReason != stop {
		t.Errorf("record %s: state %s stop %q, want %s %q", id, rec.State, rec.LastStopReason, want, stop)
	}
	if waiting != (len(rec.Pending.ToolCalls) > 0) {
		t.Errorf("pending calls %v", rec.Pending.ToolCalls)
	}
	if rec.Spend.Estimated || rec.Spend.OutputTokens == 0 {
		t.Errorf("spend %+v", rec.Spend)
	}
}

func TestSDKAnthropicThroughGatekeeper(t *testing.T) {
	for _, stream := range []bool{false, true} {
		for _, tc := range sdkTurns {
			name := tc.name
			if stream {
				name += " streaming"
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, envOpts{})
				params := anthropic.MessageNewParams{
					Model: "claude-sonnet-4-5", MaxTokens: 1024,
					Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("check the weather"))},
					Tools: []anthropic.ToolUnionParam{
						{OfTool: &anthropic.ToolParam{Name: "get_weather", InputSchema: anthropic.ToolInputSchemaParam{
							Properties: map[string]any{"city": map[string]any{"type": "string"}}}}},
						{OfTool: &anthropic.ToolParam{Name: "Bash", InputSchema: anthropic.ToolInputSchemaParam{
							Properties: map[string]any{"command": map[string]any{"type": "string"}}}}},
					},
				}
				run := func(base, key string) anthropic.Message {
					c := anthropic.NewClient(aoption.WithBaseURL(base), aoption.WithAPIKey(key), aoption.WithMaxRetries(0),
						aoption.WithHeader("X-Mock-Turn", tc.spec))
					if !stream {
						m, err := c.Messages.New(ctxT(t), params)
						if err != nil {
							t.Fatal(err)
						}
						return *m
					}
					s := c.Messages.NewStreaming(ctxT(t), params)
					defer s.Close()
					var m anthropic.Message
					for s.Next() {
						if err := m.Accumulate(s.Current()); err != nil {
							t.Fatal(err)
						}
					}
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
					return m
				}
				direct := run(e.twinURL, antKey)
				via := run(e.gk+"/t/sdk/anthropic", vkA)
				if a, b := mustJSON(t, direct), mustJSON(t, via); a != b {
					t.Fatalf("message through gatekeeper differs:\ndirect %s\nvia    %s", a, b)
				}
				checkRecord(t, e, "sdk", tc.stop, tc.waiting)
			})
		}
	}
}

func chatParams() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    "gpt-4.1",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("check the weather")},
		Tools: []openai.ChatCompletionToolUnionParam{
			openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather",
				Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}),
			openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "Bash",
				Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}}}),
		},
	}
}

func TestSDKChatThroughGatekeeper(t *testing.T) {
	for _, mode := range []string{"plain", "streaming", "streaming with usage"} {
		for _, tc := range sdkTurns {
			t.Run(tc.name+" "+mode, func(t *testing.T) {
				e := newEnv(t, envOpts{})
				params := chatParams()
				if mode == "streaming with usage" {
					params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
				}
				run := func(base, key string) openai.ChatCompletion {
					c := openai.NewClient(ooption.WithBaseURL(base), ooption.WithAPIKey(key), ooption.WithMaxRetries(0),
						ooption.WithHeader("X-Mock-Turn", tc.spec))
					if mode == "plain" {
						r, err := c.Chat.Completions.New(ctxT(t), params)
						if err != nil {
							t.Fatal(err)
						}
						return *r
					}
					s := c.Chat.Completions.NewStreaming(ctxT(t), params)
					defer s.Close()
					acc := openai.ChatCompletionAccumulator{}
					for s.Next() {
						acc.AddChunk(s.Current())
					}
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
					return acc.ChatCompletion
				}
				direct := run(e.twinURL+"/v1", oaiKey)
				via := run(e.gk+"/t/sdk/openai/v1", vkA)
				if a, b := mustJSON(t, direct), mustJSON(t, via); a != b {
					t.Fatalf("completion through gatekeeper differs:\ndirect %s\nvia    %s", a, b)
				}
				if len(via.Choices) == 0 {
					t.Fatal("no choices")
				}
				// A stream without include_usage is metered all the same:
				// gatekeeper asks the provider for usage on the agent's
				// behalf and hides it (the completions above are equal).
				checkRecord(t, e, "sdk", tc.stop, tc.waiting)
			})
		}
	}
}

func TestSDKResponsesThroughGatekeeper(t *testing.T) {
	for _, stream := range []bool{false, true} {
		for _, tc := range sdkTurns {
			name := tc.name
			if stream {
				name += " streaming"
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, envOpts{})
				params := responses.ResponseNewParams{
					Model: "gpt-4.1",
					Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("check the weather")},
					Tools: []responses.ToolUnionParam{
						{OfFunction: &responses.FunctionToolParam{Name: "get_weather", Strict: openai.Bool(false),
							Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}},
						{OfFunction: &responses.FunctionToolParam{Name: "Bash", Strict: openai.Bool(false),
							Parameters: map[string]any{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}}}},
					},
				}
				run := func(base, key string) responses.Response {
					c := openai.NewClient(ooption.WithBaseURL(base), ooption.WithAPIKey(key), ooption.WithMaxRetries(0),
						ooption.WithHeader("X-Mock-Turn", tc.spec))
					if !stream {
						r, err := c.Responses.New(ctxT(t), params)
						if err != nil {
							t.Fatal(err)
						}
						return *r
					}
					s := c.Responses.NewStreaming(ctxT(t), params)
					defer s.Close()
					var final responses.Response
					for s.Next() {
						ev := s.Current()
						switch ev.Type {
						case "response.completed", "response.incomplete", "response.failed":
							final = ev.Response
						}
					}
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
					return final
				}
				direct := run(e.twinURL+"/v1", oaiKey)
				via := run(e.gk+"/t/sdk/openai/v1", vkA)
				if a, b := mustJSON(t, direct), mustJSON(t, via); a != b {
					t.Fatalf("response through gatekeeper differs:\ndirect %s\nvia    %s", a, b)
				}
				if via.ID == "" {
					t.Fatal("empty response")
				}
				checkRecord(t, e, "sdk", tc.stop, tc.waiting)
			})
		}
	}
}
