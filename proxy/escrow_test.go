package proxy_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"gatekeeper/approvals"
	"gatekeeper/trajectory"
)

// A gated call is held: the client has the text before it and not the
// call; the record awaits approval; one pending request carries the
// canonical call and its digest. Approved, the client gets exactly the
// call the provider sent (the message equals the provider's own).
func TestEscrowAnthropicStreamApprove(t *testing.T) {
	e := newEnv(t, envOpts{limits: gatesYAML("", "")})
	spec := bashTurn("rm -rf ./build")
	params := bashParams("clean the build")
	direct := startAntStream(ctxT(t), antClient(e.twinURL, antKey, spec), params).wait(t)

	s := startAntStream(ctxT(t), antClient(e.gk+"/t/esc-approve/anthropic", vkA, spec), params)
	s.untilText(t)
	rec := e.waitState(t, "esc-approve", trajectory.AwaitingApproval)
	reqs := e.pending(t, "esc-approve", 1)
	r := reqs[0]
	want, err := approvals.Canonical("Bash", []byte(`{"command": "rm -rf ./build"}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Call.Name != "Bash" || string(r.Call.Input) != string(want.Input) || r.Digest != want.Digest() || r.Gate != "destructive-shell" {
		t.Fatalf("request %+v, want call %s %s digest %s", r, want.Name, want.Input, want.Digest())
	}
	if rec.Pending.ApprovalID != r.ID || len(rec.Pending.ToolCalls) != 1 || rec.Pending.ToolCalls[0].ID != r.CallID {
		t.Fatalf("record pending %+v, request %s call %s", rec.Pending, r.ID, r.CallID)
	}
	select {
	case <-s.done:
		t.Fatalf("stream ended while held: %v", s.err)
	default:
	}

	if code := e.adminVote(t, r.ID, carolToken, "approve"); code != 200 {
		t.Fatalf("approve: %d", code)
	}
	via := s.wait(t)
	if a, b := mustJSON(t, direct), mustJSON(t, via); a != b {
		t.Fatalf("released message differs from the provider's:\ndirect %s\nvia    %s", a, b)
	}
	uses := toolUses(via)
	if len(uses) != 1 || uses[0].Name != "Bash" || uses[0].ID != r.CallID || !jsonEqual(t, uses[0].Input, []byte(`{"command":"rm -rf ./build"}`)) ||
		via.StopReason != "tool_use" {
		t.Fatalf("released message %s", mustJSON(t, via))
	}
	rec = e.waitState(t, "esc-approve", trajectory.WaitingTool)
	if rec.Turns != 1 || len(rec.Pending.ToolCalls) != 1 || rec.Pending.ApprovalID != "" {
		t.Fatalf("record after release: turns %d pending %+v", rec.Turns, rec.Pending)
	}
	if n := len(e.turnRequests()); n != 1 {
		t.Fatalf("mock saw %d turn requests, want 1", n)
	}
}

// Denied, the call never reaches the client: the model is called again
// with the REFUSED result, and its answer is spliced into the same
// message, which the SDK accumulates as one coherent reply.
func TestEscrowAnthropicStreamDeny(t *testing.T) {
	e := newEnv(t, envOpts{limits: gatesYAML("", "")})
	spec := bashTurn("rm -rf /var/lib/data")
	params := bashParams("clean up")
	direct := startAntStream(ctxT(t), antClient(e.twinURL, antKey, spec), params).wait(t)

	s := startAntStream(ctxT(t), antClient(e.gk+"/t/esc-deny/anthropic", vkA, spec), params)
	s.untilText(t)
	r := e.pending(t, "esc-deny", 1)[0]
	if code := e.adminVote(t, r.ID, carolToken, "deny"); code != 200 {
		t.Fatalf("deny: %d", code)
	}
	via := s.wait(t)
	if len(toolUses(via)) != 0 {
		t.Fatalf("denied call delivered: %s", mustJSON(t, via))
	}
	text := messageText(via)
	if !strings.HasPrefix(text, messageText(direct)) || !strings.Contains(text, "Done: received 1 tool result") {
		t.Fatalf("message text %q, want the held text then the continuation", text)
	}
	if via.StopReason != "end_turn" || via.ID != direct.ID {
		t.Fatalf("stop %q id %q (first reply's id %q)", via.StopReason, via.ID, direct.ID)
	}
	bodies := e.turnRequests()
	if len(bodies) != 2 {
		t.Fatalf("mock saw %d turn requests, want 2", len(bodies))
	}
	// The continuation as the provider answers it directly: the spliced
	// message's usage is the sum of both calls'.
	contUsage := e.directUsage(t, bodies[1], spec)
	if via.Usage.OutputTokens != direct.Usage.OutputTokens+contUsage.OutputTokens ||
		via.Usage.InputTokens != direct.Usage.InputTokens+contUsage.InputTokens {
		t.Fatalf("usage %+v is not the sum of the first call's %+v and the continuation's %+v", via.Usage, direct.Usage, contUsage)
	}
	cont := string(bodies[1])
	if !strings.Contains(cont, `REFUSED`) || !strings.Contains(cont, approvals.ReasonDenied) || !strings.Contains(cont, r.CallID) {
		t.Fatalf("continuation request lacks the refusal: %s", cont)
	}
	rec := e.waitState(t, "esc-deny", trajectory.Ready)
	if rec.Turns != 2 || rec.LastStopReason != "end_turn" || len(rec.Pending.ToolCalls) != 0 {
		t.Fatalf("record after refusal: turns %d stop %s pending %+v", rec.Turns, rec.LastStopReason, rec.Pending)
	}
}

// Silence is denial: a request nobody decides expires, and the call is
// refused with APPROVAL_EXPIRED.
func TestEscrowExpiry(t *testing.T) {
	e := newEnv(t, envOpts{limits: gatesYAML("", "    expiry: 2s")})
	s := startAntStream(ctxT(t), antClient(e.gk+"/t/esc-expire/anthropic", vkA, bashTurn("rm -rf /srv")), bashParams("clean up"))
	s.untilText(t)
	r := e.pending(t, "esc-expire", 1)[0]
	e.clk.advance(3 * time.Second)
	via := s.wait(t)
	if len(toolUses(via)) != 0 || !strings.Contains(messageText(via), "Done: received 1 tool result") {
		t.Fatalf("expired call: message %s", mustJSON(t, via))
	}
	got, err := e.apst.Get(context.Background(), r.ID)
	if err != nil || got.State != approvals.Expired {
		t.Fatalf("request after expiry: %+v %v", got, err)
	}
	if bodies := e.turnRequests(); len(bodies) != 2 || !strings.Contains(string(bodies[1]), approvals.ReasonExpired) {
		t.Fatalf("continuation requests %d; want one carrying %s", len(bodies), approvals.ReasonExpired)
	}
}

// An approval covers exactly the call shown: the same tool with another
// argument, in the next turn, is held again under a new request.
func TestEscrowOtherArgumentHeldAgain(t *testing.T) {
	e := newEnv(t, envOpts{limits: gatesYAML("", "")})
	p := bashParams("clean up")
	s := startAntStream(ctxT(t), antClient(e.gk+"/t/esc-args/anthropic", vkA, bashTurn("rm -rf ./a")), p)
	s.untilText(t)
	first := e.pending(t, "esc-args", 1)[0]
	if _, err := e.vote(t, first.ID, "carol", []string{"secops"}, true); err != nil {
		t.Fatal(err)
	}
	m := s.wait(t)
	call := toolUses(m)[0]

	// The agent runs the call and answers it; the model then proposes the
	// same tool on another path.
	p.Messages = append(p.Messages, m.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(call.ID, "removed", false)))
	spec := `{"kind":"tool","text":"One more.","tools":[{"name":"Bash","input":{"command":"rm -rf ./b"}}]}`
	s2 := startAntStream(ctxT(t), antClient(e.gk+"/t/esc-args/anthropic", vkA, spec), p)
	s2.untilText(t)
	second := e.pending(t, "esc-args", 1)[0]
	if second.ID == first.ID || second.Digest == first.Digest || !strings.Contains(string(second.Call.Input), "./b") {
		t.Fatalf("second request %+v; first %+v", second, first)
	}
	e.waitState(t, "esc-args", trajectory.AwaitingApproval)
	if _, err := e.vote(t, second.ID, "carol", []string{"secops"}, true); err != nil {
		t.Fatal(err)
	}
	if uses := toolUses(s2.wait(t)); len(uses) != 1 || !strings.Contains(string(uses[0].Input), "./b") {
		t.Fatalf("second call after its own approval: %+v", uses)
	}
}

// A quorum of two distinct roles: one secops approval leaves the request
// pending, the same person again does not count, an sre approval releases
// the call.
func TestEscrowQuorumDistinctRoles(t *testing.T) {
	e := newEnv(t, envOpts{limits: gatesYAML("{roles: [secops, sre], quorum: 2, distinct_roles: true}", "")})
	s := startAntStream(ctxT(t), antClient(e.gk+"/t/esc-quorum/anthropic", vkA, bashTurn("rm -rf /opt")), bashParams("clean up"))
	s.untilText(t)
	r := e.pending(t, "esc-quorum", 1)[0]
	state := func() approvals.State {
		got, err := e.apst.Get(context.Background(), r.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.State
	}
	if code := e.adminVote(t, r.ID, carolToken, "approve"); code != 200 || state() != approvals.Pending {
		t.Fatalf("after one secops approval: %d %s", code, state())
	}
	if code := e.adminVote(t, r.ID, carolToken, "approve"); code != http.StatusConflict || state() != approvals.Pending {
		t.Fatalf("the same approver again: %d %s, want 409 and pending", code, state())
	}
	if code := e.adminVote(t, r.ID, daveToken, "approve"); code == 200 && state() != approvals.Pending {
		t.Fatalf("a second secops approval decided a distinct-roles quorum: %s", state())
	}
	if code := e.adminVote(t, r.ID, readToken, "approve"); code != http.StatusForbidden {
		t.Fatalf("a token without a required role: %d, want 403", code)
	}
	select {
	case <-s.done:
		t.Fatalf("released before the quorum: %v", s.err)
	default:
	}
	if code := e.adminVote(t, r.ID, erinToken, "approve"); code != 200 || state() != approvals.Approved {
		t.Fatalf("sre approval: %d %s", code, state())
	}
	if uses := toolUses(s.wait(t)); len(uses) != 1 || uses[0].ID != r.CallID {
		t.Fatalf("released calls %+v", uses)
	}
}

// The agent gives up on the silent stream and retries the same turn
// without streaming: the retry re-attaches to the held turn and, once the
// call is approved, gets the reply as one Message carrying the call. The
// model was called once.
func TestEscrowNonStreamingRetry(t *testing.T) {
	e := newEnv(t, envOpts{limits: gatesYAML("", "")})
	spec := bashTurn("rm -rf ./build")
	params := bashParams("clean the build")
	direct := startAntStream(ctxT(t), antClient(e.twinURL, antKey, spec), params).wait(t)

	ctx, giveUp := context.WithCancel(ctxT(t))
	s := startAntStream(ctx, antClient(e.gk+"/t/esc-retry/anthropic", vkA, spec), params)
	s.untilText(t)
	r := e.pending(t, "esc-retry", 1)[0]
	giveUp()
	<-s.done

	type result struct {
		m   *anthropic.Message
		err error
	}
	got := make(chan result, 1)
	go func() {
		c := antClient(e.gk+"/t/esc-retry/anthropic", vkA, spec)
		m, err := c.Messages.New(ctxT(t), params)
		got <- result{m, err}
	}()
	// The retry is waiting on the hold: nothing is decided, the record
	// still awaits approval, and the model was not called again.
	waitFor(t, "the retry to re-attach", func() bool {
		return len(e.turnRequests()) == 1 && e.record(t, "esc-retry").State == trajectory.AwaitingApproval
	})
	time.Sleep(50 * time.Millisecond)
	select {
	case res := <-got:
		t.Fatalf("retry answered before the decision: %+v %v", res.m, res.err)
	default:
	}
	if _, err := e.vote(t, r.ID, "carol", []string{"secops"}, true); err != nil {
		t.Fatal(err)
	}
	var res result
	select {
	case res = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("retry got no reply")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	if a, b := mustJSON(t, direct), mustJSON(t, *res.m); a != b {
		t.Fatalf("non-streamed reply differs from the provider's message:\ndirect %s\nretry  %s", a, b)
	}
	if uses := toolUses(*res.m); len(uses) != 1 || uses[0].ID != r.CallID {
		t.Fatalf("calls %+v", uses)
	}
	if n := len(e.turnRequests()); n != 1 {
		t.Fatalf("mock saw %d turn requests, want 1", n)
	}
	e.waitState(t, "esc-retry", trajectory.WaitingTool)

	// A third attempt of the same turn gets no second delivery.
	c := antClient(e.gk+"/t/esc-retry/anthropic", vkA, spec)
	_, err := c.Messages.New(ctxT(t), params)
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusConflict {
		t.Fatalf("third attempt: %v, want 409", err)
	}
	if n := len(e.turnRequests()); n != 1 {
		t.Fatalf("mock saw %d turn requests after the third attempt, want 1", n)
	}
}

// A reply with no gated call streams through as before, for a tenant with
// gates (a harmless call) and for one without (the same gated-looking
// call: team-b has no gate).
func TestEscrowNoGatedCall(t *testing.T) {
	e := newEnv(t, envOpts{limits: gatesYAML("", "")})
	for _, tc := range []struct{ name, key, command string }{
		{"gated tenant, harmless call", vkA, "ls -la"},
		{"tenant without gates", vkB, "rm -rf ./build"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := strings.Replace(bashTurn(tc.command), `"first_only":true,`, "", 1)
			direct := startAntStream(ctxT(t), antClient(e.twinURL, antKey, spec), bashParams("list")).wait(t)
			via := startAntStream(ctxT(t), antClient(e.gk+"/t/esc-none-"+tc.key[3:9]+"/anthropic", tc.key, spec), bashParams("list")).wait(t)
			if len(toolUses(via)) != 1 || messageText(via) != messageText(direct) {
				t.Fatalf("message %s", mustJSON(t, via))
			}
			if uses := toolUses(via); !jsonEqual(t, uses[0].Input, toolUses(direct)[0].Input) {
				t.Fatalf("call %s, provider sent %s", uses[0].Input, toolUses(direct)[0].Input)
			}
		})
	}
	if reqs, _ := e.apst.List(context.Background(), approvals.Filter{Limit: 100}); len(reqs) != 0 {
		t.Fatalf("approval requests opened: %+v", reqs)
	}
}

// A non-streamed request gives up during the hold; its streaming retry
// re-attaches and gets the held body rendered as the provider's stream,
// which the SDK accumulates back into the provider's message.
func TestEscrowStreamingRetryOfJSONHold(t *testing.T) {
	e := newEnv(t, envOpts{limits: gatesYAML("", "")})
	spec := bashTurn("rm -rf ./build")
	dc := antClient(e.twinURL, antKey, spec)
	direct, err := dc.Messages.New(ctxT(t), bashParams("clean"))
	if err != nil {
		t.Fatal(err)
	}
	c := antClient(e.gk+"/t/esc-render/anthropic", vkA, spec)
	ctx, giveUp := context.WithCancel(ctxT(t))
	first := make(chan error, 1)
	go func() {
		_, err := c.Messages.New(ctx, bashParams("clean"))
		first <- err
	}()
	r := e.pending(t, "esc-render", 1)[0]
	giveUp()
	<-first
	s := startAntStream(ctxT(t), c, bashParams("clean"))
	if code := e.adminVote(t, r.ID, carolToken, "approve"); code != 200 {
		t.Fatalf("approve: %d", code)
	}
	via := s.wait(t)
	if a, b := mustJSON(t, *direct), mustJSON(t, via); a != b {
		t.Fatalf("streamed retry differs from the provider's message:\ndirect %s\nretry  %s", a, b)
	}
	if n := len(e.turnRequests()); n != 1 {
		t.Fatalf("mock saw %d turn requests, want 1", n)
	}
}
