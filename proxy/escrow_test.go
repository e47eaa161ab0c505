package proxy_test

import (
	"strings"
	"testing"

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

	if _, err := e.vote(t, r.ID, "carol", []string{"secops"}, true); err != nil {
		t.Fatal(err)
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
	if _, err := e.vote(t, r.ID, "carol", []string{"secops"}, false); err != nil {
		t.Fatal(err)
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
	if via.Usage.OutputTokens <= direct.Usage.OutputTokens || via.Usage.InputTokens <= direct.Usage.InputTokens {
		t.Fatalf("usage %+v not summed over both calls (first %+v)", via.Usage, direct.Usage)
	}
	bodies := e.turnRequests()
	if len(bodies) != 2 {
		t.Fatalf("mock saw %d turn requests, want 2", len(bodies))
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
