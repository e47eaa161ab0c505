package mockprovider

import (
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	oaioption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tidwall/gjson"
)

var (
	chatCallID   = regexp.MustCompile(`^call_[0-9A-Za-z]{24}$`)
	chatID       = regexp.MustCompile(`^chatcmpl-[0-9A-Za-z]{29}$`)
	responseID   = regexp.MustCompile(`^resp_[0-9a-f]{48}$`)
	functionItem = regexp.MustCompile(`^fc_[0-9a-f]{48}$`)
)

const (
	specText     = `{"kind":"text","text":"Hello there, this is the mock speaking."}`
	specParallel = `{"kind":"tool","tools":[{"name":"get_weather","input":{"city":"Paris \"Rive Gauche\"\n"}},{"name":"Bash","input":{"command":"ls -la"}}]}`
	specMaxText  = `{"kind":"max_tokens","max_output_tokens":10}`
	specMaxTool  = `{"kind":"max_tokens","cut_in_tool":true,"tools":[{"name":"Bash","input":{"command":"echo hello world"}}]}`
	specRefusal  = `{"kind":"refusal"}`
	specThinking = `{"kind":"text","thinking":"Think first, then answer.","text":"Answer."}`
	specItems    = `{"kind":"tool","tools":[` +
		`{"item":"local_shell_call","input":{"type":"exec","command":["ls","-la"],"env":{}}},` +
		`{"item":"shell_call","input":{"commands":["ls -la"],"timeout_ms":1000}},` +
		`{"item":"apply_patch_call","input":{"type":"update_file","path":"a.go","diff":"@@\n-a\n+b\n"}},` +
		`{"item":"computer_call","input":{"type":"click","x":10,"y":20,"button":"left"}},` +
		`{"item":"web_search_call","input":{"type":"search","query":"gatekeeper"}},` +
		`{"item":"foo_call","input":{"verb":"frob"}}]}`
)

// scriptedItemsWant are the items specItems gives: type, input member,
// input, whether the item has a call_id.
var scriptedItemsWant = []struct {
	typ, member, input string
	callID             bool
}{
	{"local_shell_call", "action", `{"type":"exec","command":["ls","-la"],"env":{}}`, true},
	{"shell_call", "action", `{"commands":["ls -la"],"timeout_ms":1000}`, true},
	{"apply_patch_call", "operation", `{"type":"update_file","path":"a.go","diff":"@@\n-a\n+b\n"}`, true},
	{"computer_call", "action", `{"type":"click","x":10,"y":20,"button":"left"}`, true},
	{"web_search_call", "action", `{"type":"search","query":"gatekeeper"}`, false},
	{"foo_call", "action", `{"verb":"frob"}`, true},
}

var parallelCalls = []struct{ name, args string }{
	{"get_weather", `{"city":"Paris \"Rive Gauche\"\n"}`},
	{"Bash", `{"command":"ls -la"}`},
}

func openAIClient(url string) openai.Client {
	return openai.NewClient(oaioption.WithBaseURL(url+"/v1"), oaioption.WithAPIKey("sk-openai-real"), oaioption.WithMaxRetries(0))
}

var weatherSchema = map[string]any{
	"type":       "object",
	"properties": map[string]any{"city": map[string]any{"type": "string"}},
	"required":   []string{"city"},
}

func chatParams(prompt string, includeUsage bool) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{
		Model:    "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		Tools: []openai.ChatCompletionToolUnionParam{
			openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather", Parameters: weatherSchema}),
		},
	}
	if includeUsage {
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	}
	return p
}

// chatTurn runs one Chat Completions request; streamed replies are
// accumulated with the SDK's ChatCompletionAccumulator. usageChunk tells
// whether an empty-choices usage chunk arrived.
func chatTurn(t *testing.T, url string, stream bool, params openai.ChatCompletionNewParams, opts ...oaioption.RequestOption) (cc openai.ChatCompletion, usageChunk bool, err error) {
	t.Helper()
	client := openAIClient(url)
	ctx := testContext(t)
	if !stream {
		res, err := client.Chat.Completions.New(ctx, params, opts...)
		if err != nil {
			return openai.ChatCompletion{}, false, err
		}
		return *res, false, nil
	}
	s := client.Chat.Completions.NewStreaming(ctx, params, opts...)
	defer s.Close()
	var acc openai.ChatCompletionAccumulator
	for s.Next() {
		chunk := s.Current()
		if !acc.AddChunk(chunk) {
			t.Fatalf("accumulator rejected chunk %s", chunk.RawJSON())
		}
		if len(chunk.Choices) == 0 {
			usageChunk = true
		}
	}
	return acc.ChatCompletion, usageChunk, s.Err()
}

func TestChatSDK(t *testing.T) {
	tests := []struct {
		name   string
		spec   string
		finish string
		check  func(t *testing.T, cc openai.ChatCompletion)
	}{
		{"text", specText, "stop", func(t *testing.T, cc openai.ChatCompletion) {
			if got := cc.Choices[0].Message.Content; got != "Hello there, this is the mock speaking." {
				t.Errorf("content = %q", got)
			}
		}},
		{"parallel tools", specParallel, "tool_calls", func(t *testing.T, cc openai.ChatCompletion) {
			calls := cc.Choices[0].Message.ToolCalls
			if len(calls) != len(parallelCalls) {
				t.Fatalf("tool calls = %+v", calls)
			}
			for i, w := range parallelCalls {
				c := calls[i]
				if !chatCallID.MatchString(c.ID) || c.Function.Name != w.name || !jsonEqual(t, c.Function.Arguments, w.args) {
					t.Errorf("call %d = %s %s %s, want %s %s", i, c.ID, c.Function.Name, c.Function.Arguments, w.name, w.args)
				}
			}
			if calls[0].ID == calls[1].ID {
				t.Error("parallel calls share an id")
			}
		}},
		{"max_tokens", specMaxText, "length", func(t *testing.T, cc openai.ChatCompletion) {
			if got := cc.Choices[0].Message.Content; got == "" || !strings.HasPrefix(defaultLongText, got) {
				t.Errorf("content = %q", got)
			}
		}},
		{"max_tokens in a tool call", specMaxTool, "length", func(t *testing.T, cc openai.ChatCompletion) {
			calls := cc.Choices[0].Message.ToolCalls
			full := `{"command":"echo hello world"}`
			if len(calls) != 1 || calls[0].Function.Name != "Bash" || calls[0].Function.Arguments == "" ||
				!strings.HasPrefix(full, calls[0].Function.Arguments) || calls[0].Function.Arguments == full {
				t.Errorf("tool calls = %+v, want Bash with a strict prefix of %s", calls, full)
			}
		}},
		{"refusal", specRefusal, "stop", func(t *testing.T, cc openai.ChatCompletion) {
			m := cc.Choices[0].Message
			if m.Refusal != defaultRefusal || m.Content != "" {
				t.Errorf("refusal %q content %q", m.Refusal, m.Content)
			}
		}},
		{"thinking counts as reasoning tokens", specThinking, "stop", func(t *testing.T, cc openai.ChatCompletion) {
			if cc.Choices[0].Message.Content != "Answer." {
				t.Errorf("content = %q", cc.Choices[0].Message.Content)
			}
		}},
	}
	type mode struct {
		name                 string
		stream, includeUsage bool
	}
	modes := []mode{{"json", false, false}, {"stream", true, false}, {"stream with usage", true, true}}
	for _, tt := range tests {
		for _, m := range modes {
			t.Run(tt.name+"/"+m.name, func(t *testing.T) {
				s, url := newMock(t, Options{})
				cc, usageChunk, err := chatTurn(t, url, m.stream, chatParams("hello", m.includeUsage), oaioption.WithHeader(HeaderTurn, tt.spec))
				if err != nil {
					t.Fatal(err)
				}
				if len(cc.Choices) != 1 || cc.Choices[0].FinishReason != tt.finish {
					t.Fatalf("choices = %+v, want one finishing %q", cc.Choices, tt.finish)
				}
				if !chatID.MatchString(cc.ID) || cc.Model != "gpt-4o" {
					t.Errorf("id %q model %q", cc.ID, cc.Model)
				}
				tt.check(t, cc)
				rec := onlyRequest(t, s)
				wantUsage := !m.stream || m.includeUsage
				if m.stream && usageChunk != m.includeUsage {
					t.Errorf("usage chunk seen = %v, want %v (include_usage)", usageChunk, m.includeUsage)
				}
				if !wantUsage {
					if cc.Usage.TotalTokens != 0 {
						t.Errorf("usage without include_usage: %+v", cc.Usage)
					}
				} else {
					if cc.Usage.PromptTokens != tokens(len(rec.Body)) || cc.Usage.CompletionTokens < 1 ||
						cc.Usage.TotalTokens != cc.Usage.PromptTokens+cc.Usage.CompletionTokens {
						t.Errorf("usage = %+v, body %d bytes", cc.Usage, len(rec.Body))
					}
					if tt.spec == specThinking && cc.Usage.CompletionTokensDetails.ReasoningTokens == 0 {
						t.Error("thinking turn reports no reasoning tokens")
					}
				}
				if rec.API != APIChat || rec.APIKey != "sk-openai-real" || rec.Turn != "header" {
					t.Errorf("record api %q key %q turn %q", rec.API, rec.APIKey, rec.Turn)
				}
			})
		}
	}
}

func TestChatSDKCachedTokens(t *testing.T) {
	_, url := newMock(t, Options{})
	cc, _, err := chatTurn(t, url, true, chatParams(strings.Repeat("long context ", 800), true))
	if err != nil {
		t.Fatal(err)
	}
	u := cc.Usage
	if u.PromptTokens < 1024 || u.PromptTokensDetails.CachedTokens == 0 || u.PromptTokensDetails.CachedTokens%128 != 0 ||
		u.PromptTokensDetails.CachedTokens >= u.PromptTokens {
		t.Errorf("usage = %+v, want cached tokens in 128-token steps below the prompt", u)
	}
}

func responsesParams(prompt string) responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model: "gpt-4o",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)},
		Tools: []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather", weatherSchema, false)},
	}
}

// responsesTurn runs one Responses request. For a stream it returns the
// terminal event's response and checks that the deltas add up to it.
func responsesTurn(t *testing.T, url string, stream bool, params responses.ResponseNewParams, opts ...oaioption.RequestOption) (*responses.Response, error) {
	t.Helper()
	client := openAIClient(url)
	ctx := testContext(t)
	if !stream {
		return client.Responses.New(ctx, params, opts...)
	}
	s := client.Responses.NewStreaming(ctx, params, opts...)
	defer s.Close()
	var final *responses.Response
	text := map[string]string{} // per item id
	args := map[string]string{}
	for s.Next() {
		ev := s.Current()
		switch ev.Type {
		case "response.output_text.delta", "response.refusal.delta":
			text[ev.ItemID] += ev.Delta
		case "response.function_call_arguments.delta":
			args[ev.ItemID] += ev.Delta
		case "response.function_call_arguments.done":
			if args[ev.ItemID] != ev.Arguments {
				t.Errorf("argument deltas %q != done %q", args[ev.ItemID], ev.Arguments)
			}
		case "response.completed", "response.incomplete":
			r := ev.Response
			final = &r
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if final == nil {
		t.Fatal("no terminal event")
	}
	for _, item := range final.Output {
		switch item.Type {
		case "message":
			c := item.Content[0]
			if got := text[item.ID]; got != c.Text+c.Refusal {
				t.Errorf("text deltas %q != final %q", got, c.Text+c.Refusal)
			}
		case "function_call":
			if args[item.ID] != item.Arguments.OfString {
				t.Errorf("argument deltas %q != final %q", args[item.ID], item.Arguments.OfString)
			}
		}
	}
	return final, nil
}

func TestResponsesSDK(t *testing.T) {
	tests := []struct {
		name   string
		spec   string
		status responses.ResponseStatus
		check  func(t *testing.T, r *responses.Response)
	}{
		{"text", specText, "completed", func(t *testing.T, r *responses.Response) {
			if r.OutputText() != "Hello there, this is the mock speaking." {
				t.Errorf("output text = %q", r.OutputText())
			}
		}},
		{"parallel tools", specParallel, "completed", func(t *testing.T, r *responses.Response) {
			if len(r.Output) != len(parallelCalls) {
				t.Fatalf("output = %+v", r.Output)
			}
			for i, w := range parallelCalls {
				it := r.Output[i]
				if it.Type != "function_call" || !functionItem.MatchString(it.ID) || !chatCallID.MatchString(it.CallID) ||
					it.Name != w.name || !jsonEqual(t, it.Arguments.OfString, w.args) || it.Status != "completed" {
					t.Errorf("item %d = %s %s %s %s %s %s", i, it.Type, it.ID, it.CallID, it.Name, it.Arguments.OfString, it.Status)
				}
			}
		}},
		{"max_tokens", specMaxText, "incomplete", func(t *testing.T, r *responses.Response) {
			if r.IncompleteDetails.Reason != "max_output_tokens" || !strings.HasPrefix(defaultLongText, r.OutputText()) ||
				r.Output[0].Status != "incomplete" || r.Usage.OutputTokens != 10 {
				t.Errorf("incomplete %+v, text %q, status %q, usage %+v", r.IncompleteDetails, r.OutputText(), r.Output[0].Status, r.Usage)
			}
		}},
		{"max_tokens in a tool call", specMaxTool, "incomplete", func(t *testing.T, r *responses.Response) {
			it := r.Output[len(r.Output)-1]
			if it.Type != "function_call" || it.Status != "incomplete" || !strings.HasPrefix(`{"command":"echo hello world"}`, it.Arguments.OfString) {
				t.Errorf("last item = %s %s %q", it.Type, it.Status, it.Arguments.OfString)
			}
		}},
		{"refusal", specRefusal, "completed", func(t *testing.T, r *responses.Response) {
			c := r.Output[0].Content[0]
			if c.Type != "refusal" || c.Refusal != defaultRefusal {
				t.Errorf("content = %+v", c)
			}
		}},
		{"scripted call items", specItems, "completed", func(t *testing.T, r *responses.Response) {
			if len(r.Output) != len(scriptedItemsWant) {
				t.Fatalf("output = %d items", len(r.Output))
			}
			for i, w := range scriptedItemsWant {
				it := r.Output[i]
				raw := gjson.Parse(it.RawJSON())
				if it.Type != w.typ || it.Status != "completed" || (it.CallID != "") != w.callID ||
					!jsonEqual(t, raw.Get(w.member).Raw, w.input) || it.ID == "" {
					t.Errorf("item %d = %s", i, it.RawJSON())
				}
			}
		}},
		{"thinking counts as reasoning tokens", specThinking, "completed", func(t *testing.T, r *responses.Response) {
			if r.Usage.OutputTokensDetails.ReasoningTokens == 0 || r.OutputText() != "Answer." {
				t.Errorf("usage %+v text %q", r.Usage, r.OutputText())
			}
		}},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			name := tt.name + "/json"
			if stream {
				name = tt.name + "/stream"
			}
			t.Run(name, func(t *testing.T) {
				s, url := newMock(t, Options{})
				r, err := responsesTurn(t, url, stream, responsesParams("hello"), oaioption.WithHeader(HeaderTurn, tt.spec))
				if err != nil {
					t.Fatal(err)
				}
				if r.Status != tt.status || !responseID.MatchString(r.ID) || r.Model != "gpt-4o" {
					t.Errorf("status %q id %q model %q", r.Status, r.ID, r.Model)
				}
				tt.check(t, r)
				rec := onlyRequest(t, s)
				if r.Usage.InputTokens != tokens(len(rec.Body)) || r.Usage.OutputTokens < 1 ||
					r.Usage.TotalTokens != r.Usage.InputTokens+r.Usage.OutputTokens {
					t.Errorf("usage = %+v, body %d bytes", r.Usage, len(rec.Body))
				}
				if rec.API != APIResponses || rec.APIKey != "sk-openai-real" {
					t.Errorf("record api %q key %q", rec.API, rec.APIKey)
				}
			})
		}
	}
}

func TestOpenAISDKFailures(t *testing.T) {
	apis := []struct {
		name string
		run  func(t *testing.T, url string, stream bool, spec string) error
	}{
		{"chat", func(t *testing.T, url string, stream bool, spec string) error {
			_, _, err := chatTurn(t, url, stream, chatParams("hello", true), oaioption.WithHeader(HeaderTurn, spec))
			return err
		}},
		{"responses", func(t *testing.T, url string, stream bool, spec string) error {
			_, err := responsesTurn(t, url, stream, responsesParams("hello"), oaioption.WithHeader(HeaderTurn, spec))
			return err
		}},
	}
	for _, api := range apis {
		t.Run(api.name+"/error mid-stream", func(t *testing.T) {
			s, url := newMock(t, Options{})
			err := api.run(t, url, true, `{"kind":"error_midstream"}`)
			if err == nil || !strings.Contains(err.Error(), "server_error") && !strings.Contains(err.Error(), "Sorry") {
				t.Fatalf("err = %v, want the stream's error event", err)
			}
			if rec := onlyRequest(t, s); rec.Status != http.StatusOK || rec.Aborted || len(rec.EventTimes) < 3 {
				t.Errorf("record status %d aborted %v events %d", rec.Status, rec.Aborted, len(rec.EventTimes))
			}
		})
		t.Run(api.name+"/disconnect", func(t *testing.T) {
			for _, stream := range []bool{true, false} {
				s, url := newMock(t, Options{})
				if err := api.run(t, url, stream, `{"kind":"disconnect"}`); err == nil {
					t.Errorf("stream=%v: no error after the connection was cut", stream)
				}
				if rec := onlyRequest(t, s); !rec.Aborted {
					t.Errorf("stream=%v: record not marked aborted", stream)
				}
			}
		})
		t.Run(api.name+"/429 with retry-after", func(t *testing.T) {
			_, url := newMock(t, Options{})
			err := api.run(t, url, true, `{"kind":"http_error","status":429,"retry_after":"2s"}`)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" {
				t.Fatalf("err = %v", err)
			}
			if got := apiErr.Response.Header.Get("retry-after"); got != "2" {
				t.Errorf("retry-after = %q", got)
			}
		})
		t.Run(api.name+"/503 overloaded", func(t *testing.T) {
			_, url := newMock(t, Options{})
			err := api.run(t, url, false, `{"kind":"http_error"}`)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 || apiErr.Type != "server_error" {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

// A scripted call item streams as the API streams it: added in progress
// with its input already, a hosted web search's progress events, then done
// completed; no argument events, sequence numbers one apart.
func TestResponsesScriptedItemEvents(t *testing.T) {
	_, url := newMock(t, Options{})
	resp := post(t, testContext(t), url+"/v1/responses", `{"model":"gpt-5-codex","input":"go","stream":true}`, HeaderTurn, specItems)
	defer resp.Body.Close()
	events, err := readAllEvents(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, ev := range events {
		d := gjson.Parse(ev.data)
		if d.Get("sequence_number").Int() != int64(i) || ev.name != d.Get("type").Str {
			t.Errorf("event %d: %s", i, ev.data)
		}
		typ := d.Get("type").Str
		if strings.Contains(typ, "arguments") {
			t.Errorf("argument event %s", ev.data)
		}
		if typ == "response.output_item.added" || typ == "response.output_item.done" {
			item := d.Get("item")
			w := scriptedItemsWant[d.Get("output_index").Int()]
			status := "completed"
			if typ == "response.output_item.added" {
				status = "in_progress"
			}
			if item.Get("type").Str != w.typ || item.Get("status").Str != status || !jsonEqual(t, item.Get(w.member).Raw, w.input) {
				t.Errorf("%s", ev.data)
			}
		}
		if strings.HasPrefix(typ, "response.web_search_call.") {
			got = append(got, strings.TrimPrefix(typ, "response.web_search_call."))
		}
	}
	if want := []string{"in_progress", "searching", "completed"}; !slices.Equal(got, want) {
		t.Errorf("web search events %v, want %v", got, want)
	}
}
