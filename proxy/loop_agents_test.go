package proxy_test

import (
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// loopAgent is an agent loop on an official SDK: each step answers the
// previous reply's tool calls with one result (or, when it made none,
// says "go on") and sends the conversation so far, its reply scripted by
// spec (X-Mock-Turn).
type loopAgent interface {
	step(t *testing.T, spec, result string, isErr bool) sdkRun
}

type loopClient struct {
	name string
	path string // below /t/<id>
	new  func(base string) loopAgent
}

var loopClients = []loopClient{
	{"anthropic streaming", "/anthropic", func(base string) loopAgent { return newAnthropicAgent(base) }},
	{"chat", "/openai/v1", func(base string) loopAgent { return newChatAgent(base) }},
	{"responses streaming", "/openai/v1", func(base string) loopAgent { return newResponsesAgent(base) }},
}

type anthropicAgent struct {
	c       anthropic.Client
	params  anthropic.MessageNewParams
	pending []string
}

func newAnthropicAgent(base string) *anthropicAgent {
	p := anthropicStageParams()
	p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: "Read",
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"path": map[string]any{"type": "string"}}}}})
	return &anthropicAgent{c: anthropic.NewClient(aoption.WithBaseURL(base), aoption.WithAPIKey(vkA), aoption.WithMaxRetries(0)), params: p}
}

func (a *anthropicAgent) step(t *testing.T, spec, result string, isErr bool) sdkRun {
	var out sdkRun
	switch {
	case len(a.pending) > 0:
		var blocks []anthropic.ContentBlockParamUnion
		for _, id := range a.pending {
			blocks = append(blocks, anthropic.NewToolResultBlock(id, result, isErr))
		}
		a.params.Messages = append(a.params.Messages, anthropic.NewUserMessage(blocks...))
	case len(a.params.Messages) > 1:
		a.params.Messages = append(a.params.Messages, anthropic.NewUserMessage(anthropic.NewTextBlock("go on")))
	}
	s := a.c.Messages.NewStreaming(ctxT(t), a.params, aoption.WithHeader("X-Mock-Turn", spec), aoption.WithMiddleware(capture(&out.sent)))
	defer s.Close()
	var m anthropic.Message
	for s.Next() {
		if err := m.Accumulate(s.Current()); err != nil {
			t.Error(err)
			return out
		}
	}
	if err := s.Err(); err != nil {
		sdkError(t, err, &out)
		return out
	}
	out.read(&m)
	a.params.Messages = append(a.params.Messages, m.ToParam())
	a.pending = a.pending[:0]
	for _, b := range m.Content {
		if b.Type == "tool_use" {
			a.pending = append(a.pending, b.ID)
		}
	}
	return out
}

type chatAgent struct {
	c       openai.Client
	params  openai.ChatCompletionNewParams
	pending []string
}

func newChatAgent(base string) *chatAgent {
	p := chatParams()
	p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "Read",
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}}))
	return &chatAgent{c: openai.NewClient(ooption.WithBaseURL(base), ooption.WithAPIKey(vkA), ooption.WithMaxRetries(0)), params: p}
}

func (a *chatAgent) step(t *testing.T, spec, result string, isErr bool) sdkRun {
	var out sdkRun
	switch {
	case len(a.pending) > 0:
		if isErr {
			// OpenAI's APIs have no error flag: the result states the exit code.
			result = "Exit code: 1\nWall time: 0.1 seconds\nOutput:\n" + result
		}
		for _, id := range a.pending {
			a.params.Messages = append(a.params.Messages, openai.ToolMessage(result, id))
		}
	case len(a.params.Messages) > 1:
		a.params.Messages = append(a.params.Messages, openai.UserMessage("go on"))
	}
	r, err := a.c.Chat.Completions.New(ctxT(t), a.params, ooption.WithHeader("X-Mock-Turn", spec), ooption.WithMiddleware(capture(&out.sent)))
	if err != nil {
		sdkError(t, err, &out)
		return out
	}
	msg := r.Choices[0].Message
	out.text = msg.Content
	a.params.Messages = append(a.params.Messages, msg.ToParam())
	a.pending = a.pending[:0]
	for _, tc := range msg.ToolCalls {
		out.calls = append(out.calls, tc.Function.Name)
		a.pending = append(a.pending, tc.ID)
	}
	return out
}

type responsesAgent struct {
	c       openai.Client
	params  responses.ResponseNewParams
	pending []string
}

func newResponsesAgent(base string) *responsesAgent {
	p := responsesStageParams()
	p.Tools = append(p.Tools, responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{Name: "Read", Strict: openai.Bool(false),
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}}})
	return &responsesAgent{c: openai.NewClient(ooption.WithBaseURL(base), ooption.WithAPIKey(vkA), ooption.WithMaxRetries(0)), params: p}
}

func (a *responsesAgent) step(t *testing.T, spec, result string, isErr bool) sdkRun {
	var out sdkRun
	input := &a.params.Input.OfInputItemList
	switch {
	case len(a.pending) > 0:
		if isErr {
			result = "Process exited with code 2\nOutput:\n" + result
		}
		for _, id := range a.pending {
			o := responses.ResponseInputItemParamOfFunctionCallOutput(result)
			o.OfFunctionCallOutput.CallID = openai.String(id)
			*input = append(*input, o)
		}
	case len(*input) > 1:
		*input = append(*input, responses.ResponseInputItemParamOfMessage("go on", responses.EasyInputMessageRoleUser))
	}
	s := a.c.Responses.NewStreaming(ctxT(t), a.params, ooption.WithHeader("X-Mock-Turn", spec), ooption.WithMiddleware(capture(&out.sent)))
	defer s.Close()
	var final responses.Response
	for s.Next() {
		if ev := s.Current(); ev.Type == "response.completed" || ev.Type == "response.incomplete" {
			final = ev.Response
		}
	}
	if err := s.Err(); err != nil {
		sdkError(t, err, &out)
		return out
	}
	a.pending = a.pending[:0]
	for _, item := range final.Output {
		switch item.Type {
		case "function_call":
			out.calls = append(out.calls, item.Name)
			a.pending = append(a.pending, item.CallID)
			*input = append(*input, responses.ResponseInputItemParamOfFunctionCall(item.Arguments.OfString, item.CallID, item.Name))
		case "message":
			for _, c := range item.Content {
				out.text += c.Text
			}
			if out.text != "" {
				*input = append(*input, responses.ResponseInputItemParamOfMessage(out.text, responses.EasyInputMessageRoleAssistant))
			}
		}
	}
	return out
}
