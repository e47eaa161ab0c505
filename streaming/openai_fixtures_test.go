package streaming_test

import (
	"encoding/json"
	"reflect"
	"sort"
	"testing"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/internal/streamtest"
	"gatekeeper/streaming"
)

// openAIExpectedStop is a Responses terminal event as EXPECTED.json has it.
type openAIExpectedStop struct {
	Event             string `json:"event"`
	Status            string `json:"status"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// openAIFixtures returns the Chat and Responses fixtures' names, sorted.
func openAIFixtures(all map[string]expectedFixture) []string {
	var names []string
	for name, e := range all {
		if api, ok := e.decoderAPI(); ok && api != streaming.APIAnthropic {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

func TestOpenAIFixtures(t *testing.T) {
	all := loadExpected(t)
	names := openAIFixtures(all)
	if len(names) < 20 {
		t.Fatalf("only %d chat/responses fixtures in EXPECTED.json", len(names))
	}
	for _, name := range names {
		e := all[name]
		t.Run(name, func(t *testing.T) {
			api, _ := e.decoderAPI()
			res, said := mustDecode(t, api, fixturetest.Read(t, name))
			openAICheckStops(t, e, res)
			openAICheckToolCalls(t, e, res)
			openAICheckUsage(t, e, res)
			openAICheckErrors(t, e, res)
			if api == streaming.APIChat && res.Done != e.DoneMarker {
				t.Errorf("Done = %v, recording has [DONE] = %v", res.Done, e.DoneMarker)
			}
			if api == streaming.APIResponses && res.Done != (len(e.Stop) > 0) {
				t.Errorf("Done = %v with %d terminal events", res.Done, len(e.Stop))
			}
			if res.Truncated {
				t.Error("a complete recording decoded as truncated")
			}
			if res.Unparsed != 0 {
				t.Errorf("Unparsed = %d: %v", res.Unparsed, res.UnparsedErrors)
			}
			streamtest.CheckSays(t, res, said)
		})
	}
}

func openAICheckStops(t *testing.T, e expectedFixture, res *streaming.Result) {
	t.Helper()
	var want []streaming.Stop
	if e.API == "chat" {
		choice0 := false
		for _, raw := range e.Stop {
			var pair []any
			if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
				t.Fatalf("chat stop %s: %v", raw, err)
			}
			choice, fr := int(pair[0].(float64)), pair[1].(string)
			choice0 = choice0 || choice == 0
			want = append(want, streaming.Stop{Choice: choice, Reason: openAIChatReason(fr), Raw: fr})
		}
		if len(e.Errors) > 0 && !choice0 {
			want = append(want, streaming.Stop{Reason: streaming.StopError, Raw: "error"})
		}
	} else {
		for _, raw := range e.Stop {
			var s openAIExpectedStop
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatalf("responses stop %s: %v", raw, err)
			}
			switch s.Event {
			case "response.completed":
				reason := streaming.StopEndTurn
				if len(e.ToolCalls) > 0 {
					reason = streaming.StopToolUse
				}
				want = append(want, streaming.Stop{Reason: reason, Raw: s.Event})
			case "response.incomplete":
				reason := streaming.StopReason(s.IncompleteDetails.Reason)
				if s.IncompleteDetails.Reason == "max_output_tokens" {
					reason = streaming.StopMaxTokens
				}
				want = append(want, streaming.Stop{Reason: reason, Raw: s.Event + ":" + s.IncompleteDetails.Reason})
			case "response.failed":
				want = append(want, streaming.Stop{Reason: streaming.StopError, Raw: s.Event})
			default:
				t.Fatalf("unexpected terminal event %q", s.Event)
			}
		}
	}
	if !reflect.DeepEqual(res.Stops, want) {
		t.Errorf("Stops = %+v, want %+v", res.Stops, want)
	}
}

// openAIChatReason is the finish_reason table of the brief, restated.
func openAIChatReason(fr string) streaming.StopReason {
	return map[string]streaming.StopReason{
		"stop": streaming.StopEndTurn, "length": streaming.StopMaxTokens, "tool_calls": streaming.StopToolUse,
		"function_call": streaming.StopToolUse, "content_filter": streaming.StopContentFilter,
	}[fr]
}

func openAICheckToolCalls(t *testing.T, e expectedFixture, res *streaming.Result) {
	t.Helper()
	if len(res.ToolCalls) != len(e.ToolCalls) {
		t.Fatalf("%d tool calls, want %d: %+v", len(res.ToolCalls), len(e.ToolCalls), res.ToolCalls)
	}
	for i, w := range e.ToolCalls {
		got := res.ToolCalls[i]
		var want streaming.ToolCall
		if e.API == "chat" {
			want = streaming.ToolCall{Choice: w.Choice, Index: w.Index, Type: "function", ID: w.ID, Name: w.Name, Complete: true}
		} else {
			want = streaming.ToolCall{Index: w.OutputIndex, Type: "function_call", ID: w.CallID, ItemID: w.ItemID, Name: w.Name, Complete: true}
		}
		if !jsonEqual(t, got.Arguments, []byte(w.Arguments)) {
			t.Errorf("call %d arguments = %s, want %s", i, got.Arguments, w.Arguments)
		}
		got.Arguments = nil
		if !reflect.DeepEqual(got, want) {
			t.Errorf("call %d = %+v, want %+v", i, got, want)
		}
	}
}

// openAIWantUsage applies the normalization rules to a raw usage object.
func openAIWantUsage(t *testing.T, api string, u map[string]any) streaming.Usage {
	t.Helper()
	num := func(path string) int64 { return count(t, u, path) }
	if api == "responses" {
		cached := num("input_tokens_details.cached_tokens")
		write := num("input_tokens_details.cache_write_tokens")
		return streaming.Usage{
			InputTokens: max(num("input_tokens")-cached-write, 0), CachedInputTokens: cached, CacheWriteTokens: write,
			OutputTokens: num("output_tokens"), ReasoningTokens: num("output_tokens_details.reasoning_tokens"),
		}
	}
	prompt, completion, total := num("prompt_tokens"), num("completion_tokens"), num("total_tokens")
	cached := num("prompt_tokens_details.cached_tokens")
	if cached == 0 {
		cached = num("prompt_cache_hit_tokens")
	}
	write := num("prompt_tokens_details.cache_write_tokens")
	reasoning := num("completion_tokens_details.reasoning_tokens")
	output := completion
	if reasoning > 0 && total == prompt+completion+reasoning {
		output += reasoning
	}
	return streaming.Usage{
		InputTokens: max(prompt-cached-write, 0), CachedInputTokens: cached, CacheWriteTokens: write,
		OutputTokens: output, ReasoningTokens: reasoning,
	}
}

func openAICheckUsage(t *testing.T, e expectedFixture, res *streaming.Result) {
	t.Helper()
	if e.Usage == nil {
		if res.UsageSeen {
			t.Errorf("usage %+v reported, recording has none", res.Usage)
		}
		return
	}
	if !res.UsageSeen {
		t.Fatal("no usage, recording has one")
	}
	if want := openAIWantUsage(t, e.API, e.Usage); res.Usage != want {
		t.Errorf("Usage = %+v, want %+v", res.Usage, want)
	}
}

func openAICheckErrors(t *testing.T, e expectedFixture, res *streaming.Result) {
	t.Helper()
	if len(res.Errors) != len(e.Errors) {
		t.Fatalf("%d errors, want %d: %+v", len(res.Errors), len(e.Errors), res.Errors)
	}
	for i, w := range e.Errors {
		inner, _ := w["error"].(map[string]any)
		msg, _ := inner["message"].(string)
		if res.Errors[i].Message != msg {
			t.Errorf("error %d message = %q, want %q", i, res.Errors[i].Message, msg)
		}
		if res.Errors[i].Type == "" {
			t.Errorf("error %d has no type", i)
		}
	}
}
