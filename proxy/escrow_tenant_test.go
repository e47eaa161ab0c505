package proxy_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/tidwall/gjson"

	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// TestEscrowContinuationTenantCeiling: the model call that continues a
// held turn after a refusal reserves its worst case against its tenant's
// ceilings before it is sent, like any call. With too little left for
// even its input it is not sent: the client gets the tenant's refusal
// (402 budget_exceeded naming tokens_per_day) in the provider's format,
// as an error event on a stream or the error body of a non-streamed
// reply. With room for part of its output it is clamped (the provider
// sees a lower max_tokens, the record a budget_clamp event binding the
// tenant), and its charge settles its reservation: nothing stays held.
func TestEscrowContinuationTenantCeiling(t *testing.T) {
	const limit = 200_000
	const asked = 8000
	cases := []struct {
		name   string
		left   int64 // tokens the tenant has left when the call is refused
		stream bool
	}{
		{"refused stream", 10, true},
		{"refused json", 10, false},
		{"clamped json", 3000, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{limits: gatesYAML("", ""), teamAExtra: "    limits: {tokens_per_day: 200000}"})
			ctx := ctxT(t)
			const run = "esc-tenant"
			c := antClient(e.gk+"/t/"+run+"/anthropic", vkA, bashTurn("rm -rf /home"))
			p := bashParams("clean up")
			p.MaxTokens = asked
			var s *antStream
			var call *antCall
			if tc.stream {
				s = startAntStream(ctx, c, p)
				s.untilText(t)
			} else {
				call = startAntCall(ctx, c, p)
			}
			r := e.pending(t, run, 1)[0]
			e.waitState(t, run, trajectory.AwaitingApproval)
			// The tenant's other runs spend all but tc.left of its day
			// while the call waits for its decision.
			u, err := e.ledger.Usage(ctx, "team-a")
			if err != nil {
				t.Fatal(err)
			}
			fill := limit - u.Day().Tokens - u.Reserved.Tokens - tc.left
			if err := e.ledger.Settle(ctx, "team-a", "other-runs", tenant.Amount{Tokens: fill}); err != nil {
				t.Fatal(err)
			}
			if code := e.adminVote(t, r.ID, carolToken, "deny"); code != 200 {
				t.Fatalf("deny: %d", code)
			}

			const why = "tokens_per_day"
			turns := e.turnRequests()
			switch {
			case tc.stream:
				select {
				case <-s.done:
				case <-time.After(20 * time.Second):
					t.Fatal("stream not ended")
				}
				if s.err == nil || !strings.Contains(s.err.Error(), why) || len(toolUses(s.msg)) != 0 ||
					!strings.Contains(messageText(s.msg), "I will clean the build directory now.") {
					t.Fatalf("stream: err %v, message %s; want the held text, then an error event naming %s", s.err, mustJSON(t, s.msg), why)
				}
			case tc.left < 100:
				select {
				case <-call.done:
				case <-time.After(20 * time.Second):
					t.Fatal("no answer")
				}
				var ae *anthropic.Error
				if !errors.As(call.err, &ae) || ae.StatusCode != http.StatusPaymentRequired || !strings.Contains(ae.RawJSON(), why) ||
					gjson.Get(ae.RawJSON(), "error.type").String() != "budget_exceeded" {
					t.Fatalf("non-streamed: %v, want 402 budget_exceeded naming %s", call.err, why)
				}
			default:
				m := call.wait(t)
				if len(toolUses(m)) != 0 || !strings.Contains(messageText(m), "I will clean the build directory now.") {
					t.Fatalf("message %s", mustJSON(t, m))
				}
				turns = e.turnRequests()
				if len(turns) != 2 {
					t.Fatalf("the provider saw %d turn requests, want the turn and its continuation", len(turns))
				}
				if got := gjson.GetBytes(turns[1], "max_tokens").Int(); got <= 0 || got >= asked {
					t.Fatalf("the continuation asked max_tokens %d; want it clamped below %d to what the tenant has left", got, asked)
				}
				clamped := false
				for _, ev := range e.eventsOf(t, run, trajectory.EventBudgetClamp) {
					clamped = clamped || ev["binding"] == "tenant team-a"
				}
				if !clamped {
					t.Error("no budget_clamp event binding tenant team-a")
				}
			}
			if tc.left < 100 && len(turns) != 1 {
				t.Fatalf("the provider saw %d turn requests; the refused continuation must not be sent", len(turns))
			}
			var after tenant.Usage
			waitFor(t, "the tenant's calls in flight settled", func() bool {
				after, err = e.ledger.Usage(context.Background(), "team-a")
				return err == nil && after.InFlight == 0
			})
			if after.Reserved != (tenant.Amount{}) || after.Day().Tokens > limit {
				t.Fatalf("tenant after the turn: %d tokens held, %d spent of %d", after.Reserved.Tokens, after.Day().Tokens, limit)
			}
		})
	}
}
