package mockprovider

import (
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

var (
	toolUseID    = regexp.MustCompile(`^toolu_01[0-9A-Za-z]{22}$`)
	anthropicMsg = regexp.MustCompile(`^msg_01[0-9A-Za-z]{22}$`)
)

func anthropicClient(url string) anthropic.Client {
	return anthropic.NewClient(option.WithBaseURL(url), option.WithAPIKey("sk-ant-real"), option.WithMaxRetries(0))
}

func anthropicParams(prompt string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     "claude-sonnet-4-5",
		MaxTokens: 1024,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
		Tools: []anthropic.ToolUnionParam{
			{OfTool: &anthropic.ToolParam{Name: "get_weather", InputSchema: anthropic.ToolInputSchemaParam{
				Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}}}},
			{OfTool: &anthropic.ToolParam{Name: "Bash", InputSchema: anthropic.ToolInputSchemaParam{
				Properties: map[string]any{"command": map[string]any{"type": "string"}}, Required: []string{"command"}}}},
		},
	}
}

// anthropicTurn runs one request through the SDK, streaming or not, and
// returns the (accumulated) message.
func anthropicTurn(t *testing.T, url string, stream bool, params anthropic.MessageNewParams, opts ...option.RequestOption) (anthropic.Message, error) {
	t.Helper()
	client := anthropicClient(url)
	ctx := testContext(t)
	if !stream {
		msg, err := client.Messages.New(ctx, params, opts...)
		if err != nil {
			return anthropic.Message{}, err
		}
		return *msg, nil
	}
	s := client.Messages.NewStreaming(ctx, params, opts...)
	defer s.Close()
	var msg anthropic.Message
	for s.Next() {
		if err := msg.Accumulate(s.Current()); err != nil {
			t.Fatalf("accumulate: %v", err)
		}
	}
	return msg, s.Err()
}

func TestAnthropicSDK(t *testing.T) {
	type call struct{ name, input string }
	tests := []struct {
		name   string
		prompt string
		spec   string
		stop   anthropic.StopReason
		turn   string
		check  func(t *testing.T, msg anthropic.Message)
	}{
		{
			name: "text",
			spec: `{"kind":"text","text":"Hello there, this is the mock speaking."}`,
			stop: anthropic.StopReasonEndTurn,
			check: func(t *testing.T, msg anthropic.Message) {
				if len(msg.Content) != 1 || msg.Content[0].Type != "text" || msg.Content[0].Text != "Hello there, this is the mock speaking." {
					t.Errorf("content = %+v", msg.Content)
				}
			},
		},
		{
			name: "parallel tools",
			spec: `{"kind":"tool","text":"Checking both.","tools":[{"name":"get_weather","input":{"city":"Paris \"Rive Gauche\"\n"}},{"name":"Bash","input":{"command":"ls -la"}}]}`,
			stop: anthropic.StopReasonToolUse,
			check: func(t *testing.T, msg anthropic.Message) {
				want := []call{{"get_weather", `{"city":"Paris \"Rive Gauche\"\n"}`}, {"Bash", `{"command":"ls -la"}`}}
				if len(msg.Content) != 3 || msg.Content[0].Text != "Checking both." {
					t.Fatalf("content = %+v", msg.Content)
				}
				ids := map[string]bool{}
				for i, w := range want {
					b := msg.Content[i+1]
					if b.Type != "tool_use" || b.Name != w.name || !jsonEqual(t, string(b.Input), w.input) {
						t.Errorf("block %d = %s %s %s, want tool_use %s %s", i+1, b.Type, b.Name, b.Input, w.name, w.input)
					}
					if !toolUseID.MatchString(b.ID) || ids[b.ID] {
						t.Errorf("tool id %q is malformed or repeated", b.ID)
					}
					ids[b.ID] = true
				}
			},
		},
		{
			name:   "directive calls the first declared tool",
			prompt: "what is the weather? mock:tool",
			stop:   anthropic.StopReasonToolUse,
			turn:   "tool",
			check: func(t *testing.T, msg anthropic.Message) {
				if len(msg.Content) != 1 || msg.Content[0].Name != "get_weather" || !jsonEqual(t, string(msg.Content[0].Input), `{"city":"example"}`) {
					t.Errorf("content = %+v", msg.Content)
				}
			},
		},
		{
			name: "max_tokens cuts the text",
			spec: `{"kind":"max_tokens","max_output_tokens":10}`,
			stop: anthropic.StopReasonMaxTokens,
			check: func(t *testing.T, msg anthropic.Message) {
				text := msg.Content[0].Text
				if text == "" || len(text) > 40 || !strings.HasPrefix(defaultLongText, text) {
					t.Errorf("text = %q, want a prefix of at most 40 bytes", text)
				}
				if msg.Usage.OutputTokens != 10 {
					t.Errorf("output tokens = %d, want the limit 10", msg.Usage.OutputTokens)
				}
			},
		},
		{
			name: "max_tokens during a tool_use block",
			spec: `{"kind":"max_tokens","cut_in_tool":true,"tools":[{"name":"Bash","input":{"command":"echo hello world"}}]}`,
			stop: anthropic.StopReasonMaxTokens,
			check: func(t *testing.T, msg anthropic.Message) {
				last := msg.Content[len(msg.Content)-1]
				if last.Type != "tool_use" || last.Name != "Bash" || !toolUseID.MatchString(last.ID) {
					t.Errorf("last block = %+v, want the cut Bash tool_use", last)
				}
			},
		},
		{
			name: "refusal",
			spec: `{"kind":"refusal"}`,
			stop: anthropic.StopReasonRefusal,
			check: func(t *testing.T, msg anthropic.Message) {
				if msg.Content[0].Text != defaultRefusal || msg.StopDetails.Type != "refusal" {
					t.Errorf("content = %+v, stop details = %+v", msg.Content, msg.StopDetails)
				}
			},
		},
		{
			name: "thinking before text",
			spec: `{"kind":"text","thinking":"Think first, then answer.","text":"Answer."}`,
			stop: anthropic.StopReasonEndTurn,
			check: func(t *testing.T, msg anthropic.Message) {
				if len(msg.Content) != 2 {
					t.Fatalf("content = %+v", msg.Content)
				}
				th := msg.Content[0]
				if th.Type != "thinking" || th.Thinking != "Think first, then answer." || len(th.Signature) < 100 {
					t.Errorf("thinking block = %+v", th)
				}
				if msg.Content[1].Text != "Answer." {
					t.Errorf("text = %q", msg.Content[1].Text)
				}
			},
		},
		{
			name:   "thinking before a tool call",
			prompt: "mock:thinking_tool",
			stop:   anthropic.StopReasonToolUse,
			turn:   "thinking_tool",
			check: func(t *testing.T, msg anthropic.Message) {
				if len(msg.Content) != 2 || msg.Content[0].Type != "thinking" || msg.Content[1].Type != "tool_use" {
					t.Errorf("content = %+v", msg.Content)
				}
			},
		},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			name := tt.name + "/json"
			if stream {
				name = tt.name + "/stream"
			}
			t.Run(name, func(t *testing.T) {
				s, url := newMock(t, Options{})
				var opts []option.RequestOption
				if tt.spec != "" {
					opts = append(opts, option.WithHeader(HeaderTurn, tt.spec))
				}
				msg, err := anthropicTurn(t, url, stream, anthropicParams(orDefault(tt.prompt, "hello")), opts...)
				if err != nil {
					t.Fatal(err)
				}
				if msg.StopReason != tt.stop {
					t.Errorf("stop reason = %q, want %q", msg.StopReason, tt.stop)
				}
				if !anthropicMsg.MatchString(msg.ID) || msg.Model != "claude-sonnet-4-5" || msg.Role != "assistant" {
					t.Errorf("id, model, role = %q, %q, %q", msg.ID, msg.Model, msg.Role)
				}
				tt.check(t, msg)

				rec := onlyRequest(t, s)
				if got, want := msg.Usage.InputTokens+msg.Usage.CacheReadInputTokens, tokens(len(rec.Body)); got != want {
					t.Errorf("input tokens = %d, want about body bytes / 4 = %d", got, want)
				}
				if msg.Usage.OutputTokens < 1 {
					t.Errorf("output tokens = %d", msg.Usage.OutputTokens)
				}
				if rec.Stream != stream || rec.API != APIAnthropic || rec.APIKey != "sk-ant-real" {
					t.Errorf("record: stream %v api %q key %q", rec.Stream, rec.API, rec.APIKey)
				}
				if tt.turn != "" && rec.Turn != tt.turn {
					t.Errorf("turn = %q, want %q", rec.Turn, tt.turn)
				}
			})
		}
	}
}

func TestAnthropicSDKCacheControl(t *testing.T) {
	_, url := newMock(t, Options{})
	params := anthropicParams("hello")
	params.System = []anthropic.TextBlockParam{{
		Text:         strings.Repeat("You are a careful assistant. ", 40),
		CacheControl: anthropic.NewCacheControlEphemeralParam(),
	}}
	for _, stream := range []bool{false, true} {
		msg, err := anthropicTurn(t, url, stream, params)
		if err != nil {
			t.Fatal(err)
		}
		if msg.Usage.CacheReadInputTokens == 0 || msg.Usage.InputTokens == 0 {
			t.Errorf("stream=%v: usage = %+v, want input split into uncached and cache read", stream, msg.Usage)
		}
	}
}

func TestAnthropicSDKFailures(t *testing.T) {
	t.Run("error mid-stream", func(t *testing.T) {
		s, url := newMock(t, Options{})
		msg, err := anthropicTurn(t, url, true, anthropicParams("mock:error"))
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.Type() != "overloaded_error" {
			t.Fatalf("err = %v, want the overloaded_error event", err)
		}
		if len(msg.Content) != 1 || msg.Content[0].Text == "" || !strings.HasPrefix(defaultErrorText, msg.Content[0].Text) {
			t.Errorf("content before the error = %+v", msg.Content)
		}
		if rec := onlyRequest(t, s); rec.Canceled || rec.Aborted || rec.Status != http.StatusOK {
			t.Errorf("record = %+v", rec)
		}
	})
	t.Run("error without streaming is an HTTP 529", func(t *testing.T) {
		_, url := newMock(t, Options{})
		_, err := anthropicTurn(t, url, false, anthropicParams("mock:error"))
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 529 || apiErr.Type() != "overloaded_error" {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("disconnect", func(t *testing.T) {
		for _, stream := range []bool{true, false} {
			s, url := newMock(t, Options{})
			msg, err := anthropicTurn(t, url, stream, anthropicParams("mock:disconnect"))
			if err == nil {
				t.Fatalf("stream=%v: no error; message %+v", stream, msg)
			}
			if stream && (len(msg.Content) != 2 || msg.Content[1].Type != "tool_use") {
				t.Errorf("content before the cut = %+v, want text and part of a tool call", msg.Content)
			}
			if rec := onlyRequest(t, s); !rec.Aborted || rec.Canceled {
				t.Errorf("stream=%v: aborted %v canceled %v", stream, rec.Aborted, rec.Canceled)
			}
		}
	})
	t.Run("429 with retry-after", func(t *testing.T) {
		_, url := newMock(t, Options{})
		_, err := anthropicTurn(t, url, true, anthropicParams("hi"),
			option.WithHeader(HeaderTurn, `{"kind":"http_error","status":429,"retry_after":"7s"}`))
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Type() != "rate_limit_error" {
			t.Fatalf("err = %v", err)
		}
		if got := apiErr.Response.Header.Get("retry-after"); got != "7" {
			t.Errorf("retry-after = %q, want 7", got)
		}
		if !strings.HasPrefix(apiErr.RequestID, "req_011C") {
			t.Errorf("request id = %q", apiErr.RequestID)
		}
	})
}
