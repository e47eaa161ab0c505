package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"gatekeeper/config"
	"gatekeeper/trajectory"
)

// control sends an operator's control request through the admin API.
func (e *env) control(t *testing.T, id, verb, body string) {
	t.Helper()
	resp := e.do(t, "POST", "/admin/v1/trajectories/"+id+"/"+verb, body, "Authorization", "Bearer "+adminToken)
	if b := readAll(t, resp); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("%s %s: status %d: %s", verb, id, resp.StatusCode, b)
	}
}

// slowCall is a reply that streams one long, destructive tool call slowly.
var slowCall = fmt.Sprintf(`{"kind":"tool","text":"Cleaning up.","event_delay":"30ms","tools":[{"name":"Bash","input":{"command":%q}}]}`,
	"rm -rf /srv/data/"+strings.Repeat("old-build-artifacts/", 40))

// waitStreaming waits until the record has a call in flight and the mock
// has sent part of its reply.
func waitStreaming(t *testing.T, e *env, id string) {
	t.Helper()
	waitFor(t, "the call in flight", func() bool {
		rec, err := e.store.Get(context.Background(), id)
		return err == nil && rec.State == trajectory.CallingModel
	})
	time.Sleep(400 * time.Millisecond) // a few events, the tool call begun
}

func checkCanceled(t *testing.T, e *env, id string) {
	t.Helper()
	waitFor(t, "the provider to see its connection closed", func() bool {
		reqs := e.mock.Requests()
		return len(reqs) == 1 && (reqs[0].Canceled || reqs[0].Aborted)
	})
	var rec *trajectory.Record
	waitFor(t, "the record to end", func() bool { rec = e.record(t, id); return rec.State.Terminal() })
	if rec.State != trajectory.Canceled || rec.ExitReason != "CANCELED" || rec.LastStopReason != "canceled" {
		t.Errorf("record %s %s stop %q", rec.State, rec.ExitReason, rec.LastStopReason)
	}
	if !rec.Spend.Estimated || rec.Spend.OutputTokens == 0 || rec.Spend.Dollars == 0 {
		t.Errorf("streamed tokens not charged as estimated: %+v", rec.Spend)
	}
	// Every later request of the trajectory is refused, not retried.
	resp := e.do(t, "POST", "/t/"+id+"/anthropic/v1/messages", anthropicReq(false, "again"), hdr()...)
	if b := readAll(t, resp); resp.StatusCode != http.StatusForbidden || !bytes.Contains(b, []byte("trajectory_canceled")) {
		t.Errorf("after cancel: %d %s", resp.StatusCode, b)
	}
	if n := len(e.mock.Requests()); n != 1 {
		t.Errorf("%d requests reached the provider", n)
	}
}

func TestCancelMidToolCallAnthropic(t *testing.T) {
	e := newEnv(t, envOpts{realClock: true})
	c := anthropic.NewClient(aoption.WithBaseURL(e.gk+"/t/cancel-a/anthropic"), aoption.WithAPIKey(vkA),
		aoption.WithMaxRetries(0), aoption.WithHeader("X-Mock-Turn", slowCall))
	s := c.Messages.NewStreaming(ctxT(t), anthropicStageParams())
	defer s.Close()
	done := make(chan struct{})
	var m anthropic.Message
	var accErr error
	go func() {
		defer close(done)
		for s.Next() {
			if err := m.Accumulate(s.Current()); err != nil && accErr == nil {
				accErr = err
			}
		}
	}()
	waitStreaming(t, e, "cancel-a")
	e.control(t, "cancel-a", "cancel", "")
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end after cancel")
	}
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "trajectory_canceled") {
		t.Errorf("SDK error %v, want trajectory_canceled", err)
	}
	for _, b := range m.Content {
		if b.Type == "tool_use" {
			t.Errorf("the agent received a tool call: %+v", b)
		}
	}
	checkCanceled(t, e, "cancel-a")
}

func TestCancelMidToolCallChat(t *testing.T) {
	e := newEnv(t, envOpts{realClock: true})
	c := openai.NewClient(ooption.WithBaseURL(e.gk+"/t/cancel-c/openai/v1"), ooption.WithAPIKey(vkA),
		ooption.WithMaxRetries(0), ooption.WithHeader("X-Mock-Turn", slowCall))
	s := c.Chat.Completions.NewStreaming(ctxT(t), chatParams())
	defer s.Close()
	done := make(chan struct{})
	acc := openai.ChatCompletionAccumulator{}
	go func() {
		defer close(done)
		for s.Next() {
			acc.AddChunk(s.Current())
		}
	}()
	waitStreaming(t, e, "cancel-c")
	e.control(t, "cancel-c", "cancel", "")
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end after cancel")
	}
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "trajectory_canceled") {
		t.Errorf("SDK error %v, want trajectory_canceled", err)
	}
	if len(acc.Choices) > 0 && len(acc.Choices[0].Message.ToolCalls) > 0 {
		t.Errorf("the agent received tool calls %+v", acc.Choices[0].Message.ToolCalls)
	}
	checkCanceled(t, e, "cancel-c")
}

func TestKillDropsTheConnection(t *testing.T) {
	e := newEnv(t, envOpts{realClock: true})
	errc := make(chan error, 1)
	go func() {
		c := anthropic.NewClient(aoption.WithBaseURL(e.gk+"/t/kill/anthropic"), aoption.WithAPIKey(vkA),
			aoption.WithMaxRetries(0), aoption.WithHeader("X-Mock-Turn", slowCall))
		s := c.Messages.NewStreaming(ctxT(t), anthropicStageParams())
		defer s.Close()
		for s.Next() {
		}
		errc <- s.Err()
	}()
	waitStreaming(t, e, "kill")
	e.control(t, "kill", "kill", "")
	select {
	case err := <-errc:
		if err == nil {
			t.Error("the stream ended cleanly after kill")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end after kill")
	}
	var rec *trajectory.Record
	waitFor(t, "the killed call charged", func() bool { rec = e.record(t, "kill"); return rec.Spend.Turns == 1 })
	if rec.State != trajectory.Failed || rec.ExitReason != "KILLED" || !rec.Spend.Estimated {
		t.Errorf("record %s %s spend %+v", rec.State, rec.ExitReason, rec.Spend)
	}
	resp := e.do(t, "POST", "/t/kill/anthropic/v1/messages", anthropicReq(false, "again"), hdr()...)
	if b := readAll(t, resp); resp.StatusCode != http.StatusForbidden {
		t.Errorf("after kill: %d %s", resp.StatusCode, b)
	}
}

func TestPauseHoldsUntilResume(t *testing.T) {
	e := newEnv(t, envOpts{})
	readAll(t, e.do(t, "POST", "/t/nap/anthropic/v1/messages", anthropicReq(false, "first"), hdr("X-Mock-Turn", `{"kind":"text"}`)...))
	waitFor(t, "the first turn", func() bool { return e.record(t, "nap").State == trajectory.Ready })
	e.control(t, "nap", "pause", "")
	if st := e.record(t, "nap").State; st != trajectory.Paused {
		t.Fatalf("state %s after pause", st)
	}
	type result struct {
		status int
		body   []byte
	}
	res := make(chan result, 1)
	go func() {
		resp := e.do(t, "POST", "/t/nap/anthropic/v1/messages", anthropicReq(false, "first"), hdr("X-Mock-Turn", `{"kind":"text"}`)...)
		res <- result{resp.StatusCode, readAll(t, resp)}
	}()
	select {
	case r := <-res:
		t.Fatalf("a request of a paused run was answered: %d %s", r.status, r.body)
	case <-time.After(300 * time.Millisecond):
	}
	if n := len(e.mock.Requests()); n != 1 {
		t.Fatalf("%d requests forwarded while paused", n)
	}
	e.control(t, "nap", "resume", "")
	select {
	case r := <-res:
		if r.status != http.StatusOK {
			t.Errorf("after resume: %d %s", r.status, r.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held request did not complete after resume")
	}
	var rec *trajectory.Record
	waitFor(t, "the second turn", func() bool { rec = e.record(t, "nap"); return rec.Turns == 2 })
}

func TestPauseHoldLimit(t *testing.T) {
	e := newEnv(t, envOpts{limits: "limits:\n  pause_hold: 300ms"})
	readAll(t, e.do(t, "POST", "/t/long-nap/anthropic/v1/messages", anthropicReq(false, "first"), hdr("X-Mock-Turn", `{"kind":"text"}`)...))
	waitFor(t, "the first turn", func() bool { return e.record(t, "long-nap").State == trajectory.Ready })
	e.control(t, "long-nap", "pause", "")
	resp := e.do(t, "POST", "/t/long-nap/anthropic/v1/messages", anthropicReq(false, "second"), hdr()...)
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		gjson.GetBytes(b, "error.type").String() != "trajectory_paused" {
		t.Errorf("held past the limit: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if n := len(e.mock.Requests()); n != 1 {
		t.Errorf("%d requests forwarded", n)
	}
}

func TestInterruptAppendsOperatorMessage(t *testing.T) {
	e := newEnv(t, envOpts{})
	readAll(t, e.do(t, "POST", "/t/steer-op/anthropic/v1/messages", anthropicReq(false, "first"), hdr("X-Mock-Turn", `{"kind":"text"}`)...))
	waitFor(t, "the first turn", func() bool { return e.record(t, "steer-op").State == trajectory.Ready })
	e.control(t, "steer-op", "interrupt", `{"message":"Stop refactoring; only fix the failing test."}`)
	for i := range 2 {
		readAll(t, e.do(t, "POST", "/t/steer-op/anthropic/v1/messages", anthropicReq(false, "first"), hdr("X-Mock-Turn", `{"kind":"text"}`)...))
		up := lastUpstream(t, e)
		msgs := gjson.GetBytes(up, "messages").Array()
		has := strings.Contains(msgs[len(msgs)-1].Raw, "only fix the failing test")
		if has != (i == 0) {
			t.Errorf("request %d carries the operator's message: %v, want %v", i, has, i == 0)
		}
	}
}

func TestCallLimits(t *testing.T) {
	e := newEnv(t, envOpts{realClock: true})
	e.cfg.Tenants[0].CallLimits.MaxOutputTokens = 100
	readAll(t, e.do(t, "POST", "/t/clamped/anthropic/v1/messages", anthropicReq(false, "hi"), hdr("X-Mock-Turn", `{"kind":"text"}`)...))
	if got := gjson.GetBytes(lastUpstream(t, e), "max_tokens").Int(); got != 100 {
		t.Errorf("forwarded max_tokens %d, want the tenant's 100", got)
	}
}

func TestIdleFinish(t *testing.T) {
	// The test clock moves a millisecond per reading: a run idle for one
	// millisecond is idle.
	e := newEnv(t, envOpts{limits: "limits:\n  idle_finish: 1ms"})
	readAll(t, e.do(t, "POST", "/t/done/anthropic/v1/messages", anthropicReq(false, "hi"), hdr("X-Mock-Turn", `{"kind":"text"}`)...))
	readAll(t, e.do(t, "POST", "/t/busy/anthropic/v1/messages", anthropicReq(false, "hi"), hdr("X-Mock-Turn", `{"kind":"tool"}`)...))
	waitFor(t, "both turns", func() bool {
		return e.record(t, "done").Turns == 1 && e.record(t, "busy").State == trajectory.WaitingTool
	})
	e.px.SweepIdle(ctxT(t))
	if rec := e.record(t, "done"); rec.State != trajectory.Completed || rec.ExitReason != "IDLE" {
		t.Errorf("idle run: %s %s", rec.State, rec.ExitReason)
	}
	if st := e.record(t, "busy").State; st != trajectory.WaitingTool {
		t.Errorf("a run waiting for tool results was finished: %s", st)
	}
}

func TestCallDeadline(t *testing.T) {
	e := newEnv(t, envOpts{realClock: true})
	e.cfg.Tenants[0].CallLimits.CallDeadline = config.Duration(300 * time.Millisecond)
	resp := e.do(t, "POST", "/t/late/anthropic/v1/messages", anthropicReq(true, "clean up"), hdr("X-Mock-Turn", slowCall)...)
	got := readAll(t, resp)
	evs := sseEvents(got)
	if len(evs) == 0 || !strings.Contains(evs[len(evs)-1], "event: error") || !strings.Contains(evs[len(evs)-1], "deadline") {
		t.Errorf("stream does not end with a deadline error event:\n%s", got)
	}
	if bytes.Contains(got, []byte(`"tool_use"`)) {
		t.Errorf("a tool call reached the agent:\n%s", got)
	}
	var rec *trajectory.Record
	waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "late"); return rec.State != trajectory.CallingModel })
	if rec.State != trajectory.Ready || rec.LastStopReason != "error" || !rec.Spend.Estimated {
		t.Errorf("record %s stop %q spend %+v", rec.State, rec.LastStopReason, rec.Spend)
	}
}

// TestCutAtOutputLimitDeliversNoHalfCall: a reply cut by max_tokens in the
// middle of a tool call's arguments reaches the agent without that call.
func TestCutAtOutputLimitDeliversNoHalfCall(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp := e.do(t, "POST", "/t/cut/anthropic/v1/messages", anthropicReq(true, "clean up"),
		hdr("X-Mock-Turn", `{"kind":"max_tokens","cut_in_tool":true,"tools":[{"name":"Bash","input":{"command":"rm -rf /srv/data/build"}}]}`)...)
	got := readAll(t, resp)
	if !bytes.Contains(got, []byte("message_stop")) || !bytes.Contains(got, []byte(`"max_tokens"`)) {
		t.Fatalf("the reply did not end as the provider ended it:\n%s", got)
	}
	if bytes.Contains(got, []byte("tool_use")) || bytes.Contains(got, []byte("rm -rf")) {
		t.Errorf("part of the cut call reached the agent:\n%s", got)
	}
	var rec *trajectory.Record
	waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "cut"); return rec.Turns == 1 })
	if rec.State != trajectory.Ready || len(rec.Pending.ToolCalls) != 0 || rec.LastStopReason != "max_tokens" {
		t.Errorf("record %s stop %q pending %v", rec.State, rec.LastStopReason, rec.Pending.ToolCalls)
	}
}

// TestPauseDuringCallAppliesAtItsEnd: a pause sent while a call streams
// waits for the call's end, which then leaves the run PAUSED.
func TestPauseDuringCallAppliesAtItsEnd(t *testing.T) {
	e := newEnv(t, envOpts{realClock: true})
	done := make(chan []byte, 1)
	go func() {
		resp := e.do(t, "POST", "/t/mid-pause/anthropic/v1/messages", anthropicReq(true, "first"),
			hdr("X-Mock-Turn", `{"kind":"text","deltas":10,"event_delay":"30ms"}`)...)
		done <- readAll(t, resp)
	}()
	waitFor(t, "the call in flight", func() bool {
		rec, err := e.store.Get(context.Background(), "mid-pause")
		return err == nil && rec.State == trajectory.CallingModel
	})
	e.control(t, "mid-pause", "pause", "")
	if got := <-done; !bytes.Contains(got, []byte("message_stop")) {
		t.Fatalf("the paused call's reply was cut:\n%s", got)
	}
	var rec *trajectory.Record
	waitFor(t, "the call's end", func() bool { rec = e.record(t, "mid-pause"); return rec.Turns == 1 })
	if rec.State != trajectory.Paused || rec.Pending.Control != nil {
		t.Errorf("after the call: %s, pending %+v", rec.State, rec.Pending.Control)
	}
}

// TestEndStreamsEndsLateCalls: a call that goes live after EndStreams
// began (its admission was under way when the shutdown's grace ran out) is
// ended as the calls EndStreams found are, not left to stream past it.
func TestEndStreamsEndsLateCalls(t *testing.T) {
	e := newEnv(t, envOpts{realClock: true})
	if left := e.px.EndStreams(ctxT(t)); left != 0 {
		t.Fatalf("EndStreams with nothing in flight left %d", left)
	}
	resp := e.do(t, "POST", "/t/late/anthropic/v1/messages", anthropicReq(true, "late"), hdr("X-Mock-Turn", slowCall)...)
	b := readAll(t, resp)
	if bytes.Contains(b, []byte("event: message_stop")) || bytes.Contains(b, []byte(`"tool_use"`)) {
		t.Errorf("the late call streamed on: %s", b)
	}
	if !bytes.Contains(b, []byte("shutting down")) {
		t.Errorf("the late call's end does not say why: %d %s", resp.StatusCode, b)
	}
}
