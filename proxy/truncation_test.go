package proxy_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"gatekeeper/trajectory"
)

const cutSpec = `{"kind":"max_tokens","cut_in_tool":true,"tools":[{"name":"Bash","input":{"command":"grep -rn TODO /srv/app/src"}}]}`

// TestTruncationLoopEndsRun: replies cut at their output limit three times
// in a row (the default max_truncations) end the run with exit reason
// TRUNCATION_LOOP; each later request carries a truncation notice, and
// each reply, streamed or not, gives the agent a notice in place of the cut
// call.
func TestTruncationLoopEndsRun(t *testing.T) {
	clients := map[string]func(t *testing.T, base string) ([]string, string, error){
		"anthropic streaming": func(t *testing.T, base string) ([]string, string, error) {
			c := anthropic.NewClient(aoption.WithBaseURL(base+"/anthropic"), aoption.WithAPIKey(vkA), aoption.WithMaxRetries(0),
				aoption.WithHeader("X-Mock-Turn", cutSpec))
			s := c.Messages.NewStreaming(ctxT(t), anthropicStageParams())
			defer s.Close()
			var m anthropic.Message
			for s.Next() {
				if err := m.Accumulate(s.Current()); err != nil {
					return nil, "", err
				}
			}
			var calls []string
			var text string
			for _, b := range m.Content {
				switch b.Type {
				case "tool_use":
					calls = append(calls, b.Name)
				case "text":
					text += b.Text
				}
			}
			return calls, text, s.Err()
		},
		"chat": func(t *testing.T, base string) ([]string, string, error) {
			c := openai.NewClient(ooption.WithBaseURL(base+"/openai/v1"), ooption.WithAPIKey(vkA), ooption.WithMaxRetries(0),
				ooption.WithHeader("X-Mock-Turn", cutSpec))
			r, err := c.Chat.Completions.New(ctxT(t), chatParams())
			if err != nil {
				return nil, "", err
			}
			var calls []string
			for _, tc := range r.Choices[0].Message.ToolCalls {
				calls = append(calls, tc.Function.Name)
			}
			return calls, r.Choices[0].Message.Content, nil
		},
		"chat streaming": func(t *testing.T, base string) ([]string, string, error) {
			c := openai.NewClient(ooption.WithBaseURL(base+"/openai/v1"), ooption.WithAPIKey(vkA), ooption.WithMaxRetries(0),
				ooption.WithHeader("X-Mock-Turn", cutSpec))
			s := c.Chat.Completions.NewStreaming(ctxT(t), chatParams())
			defer s.Close()
			acc := openai.ChatCompletionAccumulator{}
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			if s.Err() != nil {
				return nil, "", s.Err()
			}
			if len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "length" {
				t.Fatalf("choices %+v, want one finished by length", acc.Choices)
			}
			var calls []string
			for _, tc := range acc.Choices[0].Message.ToolCalls {
				calls = append(calls, tc.Function.Name)
			}
			return calls, acc.Choices[0].Message.Content, nil
		},
		"responses streaming": func(t *testing.T, base string) ([]string, string, error) {
			c := openai.NewClient(ooption.WithBaseURL(base+"/openai/v1"), ooption.WithAPIKey(vkA), ooption.WithMaxRetries(0),
				ooption.WithHeader("X-Mock-Turn", cutSpec))
			s := c.Responses.NewStreaming(ctxT(t), responsesStageParams())
			defer s.Close()
			var final responses.Response
			var deltas string
			seq := int64(-1)
			for s.Next() {
				ev := s.Current()
				if seq >= 0 && ev.SequenceNumber != seq+1 {
					t.Errorf("event %s numbered %d after %d", ev.Type, ev.SequenceNumber, seq)
				}
				seq = ev.SequenceNumber
				switch ev.Type {
				case "response.output_text.delta":
					deltas += ev.Delta
				case "response.completed", "response.incomplete":
					final = ev.Response
				}
			}
			if s.Err() != nil {
				return nil, "", s.Err()
			}
			var calls []string
			var text string
			for _, item := range final.Output {
				switch item.Type {
				case "function_call":
					calls = append(calls, item.Name)
				case "message":
					for _, c := range item.Content {
						text += c.Text
					}
				}
			}
			if final.Status != "incomplete" || text != deltas {
				t.Errorf("final response %s with text %q; the events gave %q", final.Status, text, deltas)
			}
			return calls, text, nil
		},
	}
	for name, call := range clients {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			base := e.gk + "/t/cut"
			for i := range 3 {
				calls, text, err := call(t, base)
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				// The cut call is withheld, a notice stands in its place.
				if len(calls) != 0 {
					t.Errorf("call %d: the agent received the cut calls %v", i, calls)
				}
				if !strings.Contains(text, "writing a call to Bash; the call was cut short, so it was not delivered and did not run") {
					t.Errorf("call %d: no truncation notice in the reply's text %q", i, text)
				}
				up := string(lastUpstream(t, e))
				if notice := strings.Contains(up, "cut at its output limit"); notice != (i > 0) {
					t.Errorf("call %d: truncation notice in the request: %v", i, notice)
				}
			}
			var rec *trajectory.Record
			waitFor(t, "the run ended", func() bool { rec = e.record(t, "cut"); return rec.State.Terminal() })
			if rec.State != trajectory.Failed || rec.ExitReason != "TRUNCATION_LOOP" || rec.Truncations != 3 || rec.TruncationsInRow != 3 {
				t.Errorf("record %s %s, %d truncations (%d in a row)", rec.State, rec.ExitReason, rec.Truncations, rec.TruncationsInRow)
			}
			if _, _, err := call(t, base); err == nil || !strings.Contains(err.Error(), "403") {
				t.Errorf("a call after the loop: %v, want 403", err)
			}
			if n := len(e.mock.Requests()); n != 3 {
				t.Errorf("%d requests reached the provider, want 3", n)
			}
		})
	}
}

// TestTruncationRowResets: a reply that is not cut ends the row.
func TestTruncationRowResets(t *testing.T) {
	e := newEnv(t, envOpts{})
	for i, spec := range []string{cutSpec, cutSpec, `{"kind":"text","text":"done"}`, cutSpec, cutSpec} {
		resp := e.do(t, "POST", "/t/rows/anthropic/v1/messages", anthropicReq(false, "look for TODOs"), hdr("X-Mock-Turn", spec)...)
		if b := readAll(t, resp); resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d: %d %s", i, resp.StatusCode, b)
		}
		waitFor(t, "the turn recorded", func() bool { return e.record(t, "rows").Turns == int64(i+1) })
	}
	rec := e.record(t, "rows")
	if rec.State.Terminal() || rec.Truncations != 4 || rec.TruncationsInRow != 2 {
		t.Errorf("record %s, %d truncations (%d in a row), want live with 4 (2)", rec.State, rec.Truncations, rec.TruncationsInRow)
	}
}

// TestTruncationNonStreamedWithholdsCut: a whole reply cut at its output
// limit while writing a tool call delivers no call, in any API; the notice
// stands in its place, and the record does not wait for a tool result.
func TestTruncationNonStreamedWithholdsCut(t *testing.T) {
	const notice = "writing a call to Bash; the call was cut short, so it was not delivered and did not run"
	clients := map[string]func(t *testing.T, base string) ([]string, string, error){
		"anthropic": func(t *testing.T, base string) ([]string, string, error) {
			c := anthropic.NewClient(aoption.WithBaseURL(base+"/anthropic"), aoption.WithAPIKey(vkA), aoption.WithMaxRetries(0),
				aoption.WithHeader("X-Mock-Turn", cutSpec))
			m, err := c.Messages.New(ctxT(t), anthropicStageParams())
			if err != nil {
				return nil, "", err
			}
			var calls []string
			var text string
			for _, b := range m.Content {
				switch b.Type {
				case "tool_use":
					calls = append(calls, b.Name)
				case "text":
					text += b.Text
				}
			}
			if m.StopReason != "max_tokens" {
				t.Errorf("stop reason %q, want max_tokens", m.StopReason)
			}
			return calls, text, nil
		},
		"chat": func(t *testing.T, base string) ([]string, string, error) {
			c := openai.NewClient(ooption.WithBaseURL(base+"/openai/v1"), ooption.WithAPIKey(vkA), ooption.WithMaxRetries(0),
				ooption.WithHeader("X-Mock-Turn", cutSpec))
			r, err := c.Chat.Completions.New(ctxT(t), chatParams())
			if err != nil {
				return nil, "", err
			}
			var calls []string
			for _, tc := range r.Choices[0].Message.ToolCalls {
				calls = append(calls, tc.Function.Name)
			}
			if r.Choices[0].FinishReason != "length" {
				t.Errorf("finish reason %q, want length", r.Choices[0].FinishReason)
			}
			return calls, r.Choices[0].Message.Content, nil
		},
		"responses": func(t *testing.T, base string) ([]string, string, error) {
			c := openai.NewClient(ooption.WithBaseURL(base+"/openai/v1"), ooption.WithAPIKey(vkA), ooption.WithMaxRetries(0),
				ooption.WithHeader("X-Mock-Turn", cutSpec))
			r, err := c.Responses.New(ctxT(t), responsesStageParams())
			if err != nil {
				return nil, "", err
			}
			var calls []string
			for _, it := range r.Output {
				if it.Type == "function_call" {
					calls = append(calls, it.Name)
				}
			}
			if r.Status != "incomplete" {
				t.Errorf("status %q, want incomplete", r.Status)
			}
			return calls, r.OutputText(), nil
		},
	}
	for name, call := range clients {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			calls, text, err := call(t, e.gk+"/t/cutjson")
			if err != nil {
				t.Fatal(err)
			}
			if len(calls) != 0 {
				t.Errorf("the agent received the cut calls %v", calls)
			}
			if !strings.Contains(text, notice) {
				t.Errorf("no truncation notice in the reply's text %q", text)
			}
			var rec *trajectory.Record
			waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "cutjson"); return rec.Turns == 1 })
			if rec.State == trajectory.WaitingTool || len(rec.Pending.ToolCalls) != 0 || rec.Truncations != 1 {
				t.Errorf("record %s with pending calls %v, %d truncations; want no call pending, 1 truncation",
					rec.State, rec.Pending.ToolCalls, rec.Truncations)
			}
		})
	}
}
