package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"gatekeeper/approvals"
	"gatekeeper/mockprovider"
	"gatekeeper/trajectory"
)

// Escrow tests of refusals, operators and failures.

// on_refusal end_turn: the refused call is replaced by a text saying why
// and the turn ends; the model is not called again. A non-streamed
// request is held the same way and gets the same reply as one body.
func TestEscrowEndTurn(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "json"}[stream], func(t *testing.T) {
			e := newEnv(t, envOpts{limits: gatesYAML("", "    on_refusal: end_turn")})
			c := antClient(e.gk+"/t/esc-end/anthropic", vkA, bashTurn("rm -rf /home"))
			var m anthropic.Message
			if stream {
				s := startAntStream(ctxT(t), c, bashParams("clean up"))
				s.untilText(t)
				r := e.pending(t, "esc-end", 1)[0]
				if code := e.adminVote(t, r.ID, carolToken, "deny"); code != 200 {
					t.Fatalf("deny: %d", code)
				}
				m = s.wait(t)
			} else {
				call := startAntCall(ctxT(t), c, bashParams("clean up"))
				r := e.pending(t, "esc-end", 1)[0]
				e.waitState(t, "esc-end", trajectory.AwaitingApproval)
				if code := e.adminVote(t, r.ID, carolToken, "deny"); code != 200 {
					t.Fatalf("deny: %d", code)
				}
				m = call.wait(t)
			}
			text := messageText(m)
			if len(toolUses(m)) != 0 || m.StopReason != "end_turn" || !strings.Contains(text, "I will clean the build directory now.") ||
				!strings.Contains(text, "The call to Bash was refused") {
				t.Fatalf("message %s", mustJSON(t, m))
			}
			if n := len(e.turnRequests()); n != 1 {
				t.Fatalf("mock saw %d turn requests, want 1", n)
			}
			rec := e.waitState(t, "esc-end", trajectory.Ready)
			if rec.Turns != 1 || len(rec.Pending.ToolCalls) != 0 {
				t.Fatalf("record %+v", rec)
			}
		})
	}
}

// A non-streamed request is simply held, and released whole.
func TestEscrowJSONApprove(t *testing.T) {
	e := newEnv(t, envOpts{limits: gatesYAML("", "")})
	spec := bashTurn("rm -rf ./build")
	dc := antClient(e.twinURL, antKey, spec)
	direct, err := dc.Messages.New(ctxT(t), bashParams("clean"))
	if err != nil {
		t.Fatal(err)
	}
	call := startAntCall(ctxT(t), antClient(e.gk+"/t/esc-json/anthropic", vkA, spec), bashParams("clean"))
	r := e.pending(t, "esc-json", 1)[0]
	e.waitState(t, "esc-json", trajectory.AwaitingApproval)
	if code := e.adminVote(t, r.ID, carolToken, "approve"); code != 200 {
		t.Fatalf("approve: %d", code)
	}
	if m := call.wait(t); mustJSON(t, m) != mustJSON(t, *direct) {
		t.Fatalf("released body differs:\ndirect %s\nvia    %s", mustJSON(t, *direct), mustJSON(t, m))
	}
	e.waitState(t, "esc-json", trajectory.WaitingTool)
}

// An operator's cancel ends a held stream with the provider's error event;
// the request is withdrawn and nothing is delivered.
func TestEscrowCancelWhileHeld(t *testing.T) {
	e := newEnv(t, envOpts{limits: gatesYAML("", "")})
	s := startAntStream(ctxT(t), antClient(e.gk+"/t/esc-cancel/anthropic", vkA, bashTurn("rm -rf /")), bashParams("clean up"))
	s.untilText(t)
	r := e.pending(t, "esc-cancel", 1)[0]
	resp := e.do(t, "POST", "/admin/v1/trajectories/esc-cancel/cancel", "", "Authorization", "Bearer "+adminToken)
	if b := readAll(t, resp); resp.StatusCode != 200 && resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel: %d %s", resp.StatusCode, b)
	}
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		t.Fatal("held stream not ended by the cancel")
	}
	if s.err == nil || !strings.Contains(s.err.Error(), "trajectory_canceled") || len(toolUses(s.msg)) != 0 {
		t.Fatalf("stream end: %v, message %s", s.err, mustJSON(t, s.msg))
	}
	waitFor(t, "the request withdrawn", func() bool {
		got, err := e.apst.Get(context.Background(), r.ID)
		return err == nil && got.State == approvals.Withdrawn
	})
}

// A call refused earlier in the trajectory, proposed again before that
// request expired, is refused at once: nobody is asked again.
func TestEscrowSameCallRefusedAgain(t *testing.T) {
	e := newEnv(t, envOpts{limits: gatesYAML("", "")})
	spec := bashTurn("rm -rf /etc")
	p := bashParams("clean up")
	s := startAntStream(ctxT(t), antClient(e.gk+"/t/esc-again/anthropic", vkA, spec), p)
	s.untilText(t)
	first := e.pending(t, "esc-again", 1)[0]
	if code := e.adminVote(t, first.ID, carolToken, "deny"); code != 200 {
		t.Fatalf("deny: %d", code)
	}
	m := s.wait(t)
	e.waitState(t, "esc-again", trajectory.Ready)

	p.Messages = append(p.Messages, m.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("do it anyway")))
	m2 := startAntStream(ctxT(t), antClient(e.gk+"/t/esc-again/anthropic", vkA, spec), p).wait(t)
	if len(toolUses(m2)) != 0 || !strings.Contains(messageText(m2), "Done: received 1 tool result") {
		t.Fatalf("second proposal: %s", mustJSON(t, m2))
	}
	reqs, err := e.apst.List(context.Background(), approvals.Filter{Trajectory: "esc-again", Limit: 10})
	if err != nil || len(reqs) != 2 {
		t.Fatalf("requests %d %v", len(reqs), err)
	}
	if again := reqs[0]; again.State != approvals.Denied || again.Digest != first.Digest || len(again.Votes) != 0 {
		t.Fatalf("second request %+v", again)
	}
	bodies := e.turnRequests()
	if len(bodies) != 4 || !strings.Contains(string(bodies[3]), approvals.ReasonDenied) {
		t.Fatalf("mock saw %d turn requests, want 4 (the last with the refusal)", len(bodies))
	}
}

// The same turn sent again after its hold was refused and delivered asks
// the model anew; the identical call is refused at once under a new hold
// of the same turn.
func TestEscrowSameTurnAfterRefusal(t *testing.T) {
	e := newEnv(t, envOpts{limits: gatesYAML("", "    on_refusal: end_turn")})
	c := antClient(e.gk+"/t/esc-twice/anthropic", vkA, bashTurn("rm -rf /data"))
	s := startAntStream(ctxT(t), c, bashParams("clean up"))
	s.untilText(t)
	r := e.pending(t, "esc-twice", 1)[0]
	if code := e.adminVote(t, r.ID, carolToken, "deny"); code != 200 {
		t.Fatalf("deny: %d", code)
	}
	if m := s.wait(t); len(toolUses(m)) != 0 {
		t.Fatalf("denied call delivered: %s", mustJSON(t, m))
	}
	e.waitState(t, "esc-twice", trajectory.Ready)
	m, err := c.Messages.New(ctxT(t), bashParams("clean up"))
	if err != nil {
		t.Fatal(err)
	}
	if len(toolUses(*m)) != 0 || !strings.Contains(messageText(*m), "The call to Bash was refused") {
		t.Fatalf("second sending: %s", mustJSON(t, *m))
	}
	if n := len(e.turnRequests()); n != 2 {
		t.Fatalf("mock saw %d turn requests, want 2", n)
	}
}

// The model's continuation after a refusal proposes another gated call: it
// is held in turn (a new hold of the same turn, the client still waiting).
// Refused too, the model continues a second time and proposes that same
// call again, which is refused at once (nobody is asked twice); the turn
// has had its two continuations, so it ends with the call replaced by a
// text.
func TestEscrowContinuationHeldAgain(t *testing.T) {
	script, err := mockprovider.ParseScript([]byte(`
rules:
  - when: {has_tool_results: true}
    turn: {kind: tool, text: "Then another way.", tools: [{name: Bash, input: {command: "rm -rf /other"}}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOpts{limits: gatesYAML("", ""), script: script})
	s := startAntStream(ctxT(t), antClient(e.gk+"/t/esc-chain/anthropic", vkA, bashTurn("rm -rf /first")), bashParams("clean up"))
	s.untilText(t)
	var ids []string
	for round := 0; round < 2; round++ {
		reqs := e.pending(t, "esc-chain", 1)
		r := reqs[0]
		if slices.Contains(ids, r.ID) {
			t.Fatalf("round %d: the same request %s", round, r.ID)
		}
		ids = append(ids, r.ID)
		e.waitState(t, "esc-chain", trajectory.AwaitingApproval)
		if code := e.adminVote(t, r.ID, carolToken, "deny"); code != 200 {
			t.Fatalf("round %d deny: %d", round, code)
		}
	}
	m := s.wait(t)
	text := messageText(m)
	if len(toolUses(m)) != 0 || m.StopReason != "end_turn" || strings.Count(text, "Then another way.") != 2 ||
		!strings.Contains(text, "The call to Bash was refused") {
		t.Fatalf("final message %s", mustJSON(t, m))
	}
	if n := len(e.turnRequests()); n != 3 {
		t.Fatalf("mock saw %d turn requests, want 3 (the turn and two continuations)", n)
	}
	all, err := e.apst.List(context.Background(), approvals.Filter{Trajectory: "esc-chain", Limit: 10})
	if err != nil || len(all) != 3 || all[0].State != approvals.Denied || len(all[0].Votes) != 0 || all[0].Digest != all[1].Digest {
		t.Fatalf("requests %d %v; the last %+v", len(all), err, all[0])
	}
	rec := e.waitState(t, "esc-chain", trajectory.Ready)
	if rec.Turns != 3 || len(rec.Pending.ToolCalls) != 0 {
		t.Fatalf("record turns %d pending %+v", rec.Turns, rec.Pending)
	}
}

// approvalsDown is an approvals store that cannot store a hold.
type approvalsDown struct{ approvals.Store }

func (approvalsDown) CreateHold(context.Context, *approvals.Hold, []*approvals.Request) (*approvals.Hold, error) {
	return nil, errors.New("approvals store unreachable")
}

// When the approvals store cannot hold a gated call, the call is not
// delivered: a stream ends with the provider's error event after its text,
// a non-streamed request gets 503 with Retry-After.
func TestEscrowFailsClosed(t *testing.T) {
	e := newEnv(t, envOpts{limits: gatesYAML("", ""), approvals: func(s approvals.Store) approvals.Store { return approvalsDown{s} }})
	spec := bashTurn("rm -rf /")
	s := startAntStream(ctxT(t), antClient(e.gk+"/t/esc-down/anthropic", vkA, spec), bashParams("clean up"))
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		t.Fatal("stream not ended")
	}
	if s.err == nil || !strings.Contains(s.err.Error(), "hold it for approval") || len(toolUses(s.msg)) != 0 ||
		!strings.Contains(messageText(s.msg), "I will clean the build directory now.") {
		t.Fatalf("stream: err %v message %s", s.err, mustJSON(t, s.msg))
	}
	rec := e.waitState(t, "esc-down", trajectory.Ready)
	if len(rec.Pending.ToolCalls) != 0 {
		t.Fatalf("undelivered call pending: %+v", rec.Pending)
	}

	resp := e.do(t, "POST", "/t/esc-down-json/anthropic/v1/messages", fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":100,
	 "messages":[{"role":"user","content":"clean up"}],"tools":[{"name":"Bash","input_schema":{"type":"object"}}]}`), hdr("X-Mock-Turn", spec)...)
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || strings.Contains(string(body), "tool_use") ||
		!strings.Contains(string(body), `"type":"error"`) {
		t.Fatalf("non-streamed: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}

// Two clients wait on one held turn (the original stream, still open, and
// a non-streamed retry): the approved reply goes to exactly one of them;
// the other is told it went elsewhere.
func TestEscrowDeliveredOnce(t *testing.T) {
	e := newEnv(t, envOpts{limits: gatesYAML("", "")})
	spec := bashTurn("rm -rf ./build")
	s := startAntStream(ctxT(t), antClient(e.gk+"/t/esc-once/anthropic", vkA, spec), bashParams("clean"))
	s.untilText(t)
	r := e.pending(t, "esc-once", 1)[0]
	type result struct {
		m   *anthropic.Message
		err error
	}
	got := make(chan result, 1)
	go func() {
		c := antClient(e.gk+"/t/esc-once/anthropic", vkA, spec)
		m, err := c.Messages.New(ctxT(t), bashParams("clean"))
		got <- result{m, err}
	}()
	time.Sleep(50 * time.Millisecond) // let the retry re-attach; either order must deliver once
	if code := e.adminVote(t, r.ID, carolToken, "approve"); code != 200 {
		t.Fatalf("approve: %d", code)
	}
	var retry result
	select {
	case retry = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("retry got no answer")
	}
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		t.Fatal("stream not ended")
	}
	delivered := 0
	if s.err == nil && len(toolUses(s.msg)) == 1 {
		delivered++
	} else if s.err == nil || !strings.Contains(s.err.Error(), "delivered") {
		t.Fatalf("stream neither delivered nor told: err %v, message %s", s.err, mustJSON(t, s.msg))
	}
	var ae *anthropic.Error
	switch {
	case retry.err == nil && len(toolUses(*retry.m)) == 1:
		delivered++
	case !errors.As(retry.err, &ae) || ae.StatusCode != http.StatusConflict:
		t.Fatalf("retry neither delivered nor refused with 409: %v", retry.err)
	}
	if delivered != 1 {
		t.Fatalf("the call was delivered %d times", delivered)
	}
	if n := len(e.turnRequests()); n != 1 {
		t.Fatalf("mock saw %d turn requests, want 1", n)
	}
}
