package streaming_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
)

// The official SDKs' accumulators read the streams this package writes
// (RenderSSE, SpliceStream) back into the message the body holds.

func accumulateAnthropic(t *testing.T, stream []byte) anthropic.Message {
	t.Helper()
	var msg anthropic.Message
	for _, ev := range sseEvents(t, stream) {
		if !ev.HasData {
			continue
		}
		var e anthropic.MessageStreamEventUnion
		if err := json.Unmarshal(ev.Data, &e); err != nil {
			t.Fatalf("%v: %s", err, ev.Data)
		}
		if err := msg.Accumulate(e); err != nil {
			t.Fatalf("accumulate %s: %v", ev.Data, err)
		}
	}
	return msg
}

func checkAnthropicSDK(t *testing.T, stream, body []byte) {
	t.Helper()
	got := accumulateAnthropic(t, stream)
	var want anthropic.Message
	if err := json.Unmarshal(body, &want); err != nil {
		t.Fatal(err)
	}
	if got.ID != want.ID || got.StopReason != want.StopReason || got.Usage.InputTokens != want.Usage.InputTokens ||
		got.Usage.OutputTokens != want.Usage.OutputTokens || got.Usage.CacheReadInputTokens != want.Usage.CacheReadInputTokens ||
		got.Usage.CacheCreationInputTokens != want.Usage.CacheCreationInputTokens {
		t.Errorf("SDK message %s %s %+v, want %s %s %+v", got.ID, got.StopReason, got.Usage, want.ID, want.StopReason, want.Usage)
	}
	if len(got.Content) != len(want.Content) {
		t.Fatalf("SDK message has %d blocks, want %d", len(got.Content), len(want.Content))
	}
	for i, g := range got.Content {
		w := want.Content[i]
		if g.Type != w.Type || g.Text != w.Text || g.Thinking != w.Thinking || g.Signature != w.Signature ||
			g.ID != w.ID || g.Name != w.Name || !sameArgs(g.Input, w.Input) {
			t.Errorf("SDK block %d: %+v, want %+v", i, g, w)
		}
	}
}

func accumulateChat(t *testing.T, stream []byte) openai.ChatCompletion {
	t.Helper()
	var acc openai.ChatCompletionAccumulator
	for _, ev := range sseEvents(t, stream) {
		if !ev.HasData || strings.TrimSpace(string(ev.Data)) == "[DONE]" {
			continue
		}
		var c openai.ChatCompletionChunk
		if err := json.Unmarshal(ev.Data, &c); err != nil {
			t.Fatalf("%v: %s", err, ev.Data)
		}
		if !acc.AddChunk(c) {
			t.Fatalf("the accumulator refused %s", ev.Data)
		}
	}
	return acc.ChatCompletion
}

func checkChatSDK(t *testing.T, stream, body []byte) {
	t.Helper()
	got := accumulateChat(t, stream)
	var want openai.ChatCompletion
	if err := json.Unmarshal(body, &want); err != nil {
		t.Fatal(err)
	}
	if got.ID != want.ID || got.Model != want.Model || got.Usage.PromptTokens != want.Usage.PromptTokens ||
		got.Usage.CompletionTokens != want.Usage.CompletionTokens || got.Usage.TotalTokens != want.Usage.TotalTokens {
		t.Errorf("SDK completion %s %s %+v, want %s %s %+v", got.ID, got.Model, got.Usage, want.ID, want.Model, want.Usage)
	}
	if len(got.Choices) != len(want.Choices) {
		t.Fatalf("SDK completion has %d choices, want %d", len(got.Choices), len(want.Choices))
	}
	for i, g := range got.Choices {
		w := want.Choices[i]
		if g.FinishReason != w.FinishReason || g.Message.Content != w.Message.Content || g.Message.Refusal != w.Message.Refusal ||
			len(g.Message.ToolCalls) != len(w.Message.ToolCalls) {
			t.Errorf("SDK choice %d: %+v, want %+v", i, g, w)
			continue
		}
		for j, gc := range g.Message.ToolCalls {
			wc := w.Message.ToolCalls[j]
			if gc.ID != wc.ID || gc.Function.Name != wc.Function.Name || gc.Function.Arguments != wc.Function.Arguments {
				t.Errorf("SDK call %d: %+v, want %+v", j, gc, wc)
			}
		}
	}
}

// TestSDKsReadRenderedAndSplicedStreams accumulates rendered replies and
// spliced replies with the SDKs.
func TestSDKsReadRenderedAndSplicedStreams(t *testing.T) {
	check := map[streaming.API]func(*testing.T, []byte, []byte){streaming.APIAnthropic: checkAnthropicSDK, streaming.APIChat: checkChatSDK}
	for _, api := range []streaming.API{streaming.APIAnthropic, streaming.APIChat} {
		streams := filterStreams(t, api)
		for _, name := range sortedNames(streams) {
			res, _ := mustDecode(t, api, streams[name])
			if !wholeReply(res) || len(res.Stops) > 1 {
				continue
			}
			t.Run("render/"+string(api)+"/"+name, func(t *testing.T) {
				body, err := dialects[api].AssembleJSON(streams[name])
				if err != nil {
					t.Fatal(err)
				}
				rendered, err := dialects[api].RenderSSE(body)
				if err != nil {
					t.Fatal(err)
				}
				check[api](t, rendered, body)
			})
		}
		for _, tc := range spliceCases[api] {
			t.Run("splice/"+string(api)+"/"+tc.name, func(t *testing.T) {
				first, cont := fixturetest.ReadFile(t, tc.first...), fixturetest.ReadFile(t, tc.cont...)
				spliced, err := dialects[api].SpliceStream(first, cont)
				if err != nil {
					t.Fatal(err)
				}
				fb, _ := dialects[api].AssembleJSON(first)
				cb, _ := dialects[api].AssembleJSON(cont)
				body, err := dialects[api].SpliceJSON(fb, cb)
				if err != nil {
					t.Fatal(err)
				}
				check[api](t, spliced, body)
			})
		}
	}
}
