package proxy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"gatekeeper/approvals"
	"gatekeeper/trajectory"
)

// turnEvent returns the data of the last turn event of a record.
func (e *env) turnEvent(t *testing.T, id string) string {
	t.Helper()
	var data string
	for _, ev := range e.events(t, id) {
		if ev.Type == trajectory.EventTurn {
			data = string(ev.Data)
		}
	}
	return data
}

// A non-streamed reply whose gated call cannot be held is not delivered,
// but the provider produced it: it is charged.
func TestUndeliveredHeldReplyCharged(t *testing.T) {
	e := newEnv(t, envOpts{limits: gatesYAML("", ""), approvals: func(s approvals.Store) approvals.Store { return approvalsDown{s} }})
	resp := e.do(t, "POST", "/t/charge-hold/anthropic/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":100,
	 "messages":[{"role":"user","content":"clean up"}],"tools":[{"name":"Bash","input_schema":{"type":"object"}}]}`,
		hdr("X-Mock-Turn", bashTurn("rm -rf /"))...)
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(string(body), "tool_use") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	rec := e.waitState(t, "charge-hold", trajectory.Ready)
	if rec.Turns != 1 || rec.Spend.InputTokens == 0 || rec.Spend.OutputTokens == 0 || rec.Spend.Dollars == 0 || len(rec.Pending.ToolCalls) != 0 {
		t.Fatalf("undelivered reply not charged, or its call pending: turns %d spend %+v pending %+v", rec.Turns, rec.Spend, rec.Pending)
	}
	if ev := e.turnEvent(t, "charge-hold"); !strings.Contains(ev, "reply not delivered") {
		t.Fatalf("turn event %s", ev)
	}
}

// A reply that arrived but could not be checked (larger than gatekeeper
// reads to look for gated calls) is an error after the reply: charged,
// estimated from its size.
func TestUncheckableReplyCharged(t *testing.T) {
	e := newEnv(t, envOpts{limits: gatesYAML("", "") + "\nlimits: {max_body_bytes: 2048}\n"})
	spec := fmt.Sprintf(`{"kind":"text","text":%q}`, strings.Repeat("a long answer ", 400))
	resp := e.do(t, "POST", "/t/charge-big/anthropic/v1/messages", anthropicReq(false, "tell me"), hdr("X-Mock-Turn", spec)...)
	body := readAll(t, resp)
	if resp.StatusCode < 500 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	rec := e.waitState(t, "charge-big", trajectory.Ready)
	if rec.Turns != 1 || rec.Spend.OutputTokens < 2048/4 || !rec.Spend.Estimated {
		t.Fatalf("uncheckable reply not charged from its size: turns %d spend %+v", rec.Turns, rec.Spend)
	}
}

// A call its thread took for lost (reclaimed by a later request after the
// stale-call time) is charged as estimated by that request, as a sweep
// would charge it; when its reply still ends, the reply's charge replaces
// the estimate, with an event saying so, once, and no second turn.
func TestLateSettleOfReclaimedCall(t *testing.T) {
	e := newEnv(t, envOpts{})
	// team-b has no wall-clock budget for the hour to spend.
	hdrB := []string{"x-api-key", vkB, "anthropic-version", "2023-06-01", "content-type", "application/json"}
	first, err := http.NewRequestWithContext(ctxT(t), "POST", e.gk+"/t/lost-1/anthropic/v1/messages", strings.NewReader(anthropicReq(true, "slow one")))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdrB); i += 2 {
		first.Header.Set(hdrB[i], hdrB[i+1])
	}
	first.Header.Set("X-Mock-Turn", `{"kind":"text","deltas":30,"event_delay":"30ms"}`)
	resp, err := http.DefaultClient.Do(first)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := readEvent(br); err != nil {
		t.Fatal(err)
	}
	// The first call now looks lost: an hour passes on gatekeeper's clock.
	e.clk.advance(2 * time.Hour)
	second := e.do(t, "POST", "/t/lost-1/anthropic/v1/messages", anthropicReq(false, "slow one"), hdrB...)
	if b := readAll(t, second); second.StatusCode != 200 {
		t.Fatalf("second call: %d %s", second.StatusCode, b)
	}
	var reclaimed *trajectory.Record
	waitFor(t, "the second call settled", func() bool {
		reclaimed = e.record(t, "lost-1")
		return reclaimed.Turns == 2 && reclaimed.State == trajectory.Ready
	})
	if len(reclaimed.SweptCalls) != 1 || len(reclaimed.LostCalls) != 0 {
		t.Fatalf("the reclaimed call is not remembered with its estimate: swept %+v lost %v", reclaimed.SweptCalls, reclaimed.LostCalls)
	}
	est := reclaimed.SweptCalls[0]
	if est.InputTokens <= 0 || est.Dollars <= 0 {
		t.Fatalf("the reclaimed call was not charged its estimate: %+v", est)
	}
	spent := reclaimed.Spend
	for {
		if _, err := readEvent(br); err != nil {
			break
		}
	}
	var rec *trajectory.Record
	waitFor(t, "the late settle", func() bool { rec = e.record(t, "lost-1"); return len(rec.SweptCalls) == 0 })
	var real trajectory.Usage
	for _, ev := range e.events(t, "lost-1") {
		var d struct {
			Late  bool             `json:"late"`
			Usage trajectory.Usage `json:"usage"`
		}
		if ev.Type == trajectory.EventTurn && json.Unmarshal(ev.Data, &d) == nil && d.Late {
			real = d.Usage
		}
	}
	if real.OutputTokens == 0 {
		t.Fatal("no late turn event with the reply's usage")
	}
	wantOut := spent.OutputTokens - est.OutputTokens + real.OutputTokens
	wantIn := spent.InputTokens - est.InputTokens + real.InputTokens
	if rec.Turns != 2 || rec.Spend.Turns != 2 || rec.Spend.OutputTokens != wantOut || rec.Spend.InputTokens != wantIn ||
		rec.Reserved != (trajectory.Reservation{}) || rec.State != trajectory.Ready {
		t.Fatalf("late reply did not replace the estimate once: before %+v after %+v (want %d in, %d out, 2 turns) reserved %+v state %s",
			spent, rec.Spend, wantIn, wantOut, rec.Reserved, rec.State)
	}
	late := 0
	for _, ev := range e.events(t, "lost-1") {
		if ev.Type == trajectory.EventTurn && strings.Contains(string(ev.Data), `"late":true`) {
			late++
		}
	}
	if late != 1 {
		t.Fatalf("%d late-settle events, want 1", late)
	}
}
