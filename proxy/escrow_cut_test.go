package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"gatekeeper/approvals"
	"gatekeeper/trajectory"
)

// cutGatedSpec is a reply cut at its output limit while writing a call
// the destructive-shell gate would match: its input ends half way, as
// {"command":"rm -rf /s.
const cutGatedSpec = `{"kind":"max_tokens","cut_in_tool":true,"text":"Cleaning up.","tools":[{"name":"Bash","input":{"command":"rm -rf /srv/data/build"}}]}`

// TestEscrowCutCallNotHeld: a streamed reply cut at its output limit
// inside a call a gate matches is not held, in any API: no approval
// request is opened for the half-written call, the agent gets the reply
// at once with the truncation notice in the call's place, and the turn is
// recorded and charged as any cut reply is.
func TestEscrowCutCallNotHeld(t *testing.T) {
	const notice = "writing a call to Bash; the call was cut short, so it was not delivered and did not run"
	type reply struct {
		calls []string
		text  string
		err   error
	}
	cases := []struct {
		name string
		path string
		call func(ctx context.Context, base string) reply
	}{
		{"anthropic", "/anthropic", func(ctx context.Context, base string) reply {
			s := startAntStream(ctx, antClient(base, vkA, cutGatedSpec), bashParams("clean up"))
			<-s.done
			var calls []string
			for _, u := range toolUses(s.msg) {
				calls = append(calls, u.Name)
			}
			return reply{calls, messageText(s.msg), s.err}
		}},
		{"chat", "/openai/v1", func(ctx context.Context, base string) reply {
			s := startChat(ctx, oaiClient(base, vkA, cutGatedSpec), bashChatParams())
			<-s.done
			if s.err != nil {
				return reply{err: s.err}
			}
			names, _, _, text := oaiCases[0].calls(s.final)
			if fr := s.final.(openai.ChatCompletion).Choices[0].FinishReason; fr != "length" {
				t.Errorf("finish reason %q, want length", fr)
			}
			return reply{names, text, nil}
		}},
		{"responses", "/openai/v1", func(ctx context.Context, base string) reply {
			s := startResponses(ctx, oaiClient(base, vkA, cutGatedSpec), bashResponsesParams())
			<-s.done
			if s.err != nil {
				return reply{err: s.err}
			}
			names, _, _, text := oaiCases[1].calls(s.final)
			return reply{names, text, nil}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{limits: gatesYAML("", "")})
			// A held call would keep the stream open until someone decides:
			// the reply must end well before that.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got := tc.call(ctx, e.gk+"/t/esc-cut"+tc.path)
			if got.err != nil {
				t.Errorf("the stream did not end: %v", got.err)
			}
			if len(got.calls) != 0 {
				t.Errorf("the agent received the cut calls %v", got.calls)
			}
			if !strings.Contains(got.text, notice) {
				t.Errorf("no truncation notice in the reply's text %q", got.text)
			}
			reqs, err := e.apst.List(context.Background(), approvals.Filter{Trajectory: "esc-cut", Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range reqs {
				t.Errorf("approval request %s opened (%s) for %s %s", r.ID, r.State, r.Call.Name, r.Call.Input)
			}
			var rec *trajectory.Record
			waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "esc-cut"); return rec.Turns == 1 })
			if rec.State != trajectory.Ready || rec.LastStopReason != "max_tokens" || len(rec.Pending.ToolCalls) != 0 || rec.Pending.ApprovalID != "" {
				t.Errorf("record %s stop %q pending %+v, want READY after max_tokens with nothing pending", rec.State, rec.LastStopReason, rec.Pending)
			}
			if rec.Spend.Turns != 1 || rec.Spend.InputTokens == 0 || rec.Spend.OutputTokens == 0 || rec.Truncations != 1 {
				t.Errorf("record spend %+v, %d truncations: want the cut turn charged and counted", rec.Spend, rec.Truncations)
			}
		})
	}
}
