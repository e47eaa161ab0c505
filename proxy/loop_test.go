package proxy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/trajectory"
)

// loopSpec scripts the model into a loop: the same call, same input,
// every turn.
const loopSpec = `{"kind":"tool","text":"Let me run the tests again.","tools":[{"name":"Bash","input":{"command":"make test","timeout":60}}]}`

const loopNoticeText = "[gatekeeper loop notice]"

// watchdogOn is the top-level config that turns the watchdog on with its
// defaults: 5 identical calls within 8, 5 identical results, 5 errors.
const watchdogOn = "watchdog: {enabled: true}\n"

// variedSpec is a call whose input differs every turn.
func variedSpec(i int) string {
	return fmt.Sprintf(`{"kind":"tool","tools":[{"name":"Bash","input":{"command":"sed -n %d,%dp main.go"}}]}`, i, i+40)
}

// upstreamBody is the body of the n-th request (1-based) that reached the
// provider.
func upstreamBody(t *testing.T, e *env, n int) string {
	t.Helper()
	reqs := e.mock.Requests()
	if len(reqs) < n {
		t.Fatalf("%d requests reached the provider, want at least %d", len(reqs), n)
	}
	return string(reqs[n-1].Body)
}

// declares reports whether a request body declares the tool name.
func declares(body, name string) bool {
	for _, tool := range gjson.Get(body, "tools").Array() {
		if tool.Get("name").String() == name || tool.Get("function.name").String() == name {
			return true
		}
	}
	return false
}

// loopEvents are the loop events of a record, as {step, signal}.
func loopEvents(t *testing.T, e *env, id string) []struct {
	Step   trajectory.LoopStep   `json:"step"`
	Signal trajectory.LoopSignal `json:"signal"`
} {
	t.Helper()
	var out []struct {
		Step   trajectory.LoopStep   `json:"step"`
		Signal trajectory.LoopSignal `json:"signal"`
	}
	for _, ev := range e.events(t, id) {
		if ev.Type != trajectory.EventLoop {
			continue
		}
		var d struct {
			Step   trajectory.LoopStep   `json:"step"`
			Signal trajectory.LoopSignal `json:"signal"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// TestLoopIdenticalCallsEscalate: a model that makes the same call every
// turn is steered (a notice on the request after its fifth identical call),
// restricted to read-only tools on the next (its call is withheld), and
// then paused for an operator, whose resume clears the counters and lets
// the held request go on.
func TestLoopIdenticalCallsEscalate(t *testing.T) {
	for _, c := range loopClients {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, envOpts{limits: watchdogOn})
			a := c.new(e.gk + "/t/loop" + c.path)
			for i := 1; i <= 6; i++ {
				run := a.step(t, loopSpec, fmt.Sprintf("FAIL TestParse (run %d)", i), false)
				if run.failed() || len(run.calls) != 1 {
					t.Fatalf("request %d: %d %s, calls %v", i, run.status, run.errBody, run.calls)
				}
				up := upstreamBody(t, e, i)
				// The fifth identical call is in reply 5: request 6 is steered.
				if notice := strings.Contains(up, loopNoticeText); notice != (i == 6) {
					t.Fatalf("request %d: loop notice %v", i, notice)
				}
				if !declares(up, "Bash") {
					t.Fatalf("request %d: Bash removed before the restrict step", i)
				}
			}
			if up := upstreamBody(t, e, 6); !strings.Contains(up, "same call to Bash, with the same input, 5 times in your last 8 tool calls") ||
				!strings.Contains(up, "Change your approach") {
				t.Errorf("the steer notice does not say what repeats: %s", up)
			}
			// Request 7: only read-only tools; the repeated call is withheld.
			run := a.step(t, loopSpec, "FAIL TestParse (run 7)", false)
			if run.failed() || len(run.calls) != 0 || !strings.Contains(run.text, "this run keeps repeating itself") {
				t.Fatalf("request 7: %d %s, calls %v, text %q", run.status, run.errBody, run.calls, run.text)
			}
			up := upstreamBody(t, e, 7)
			if declares(up, "Bash") || !declares(up, "Read") || !strings.Contains(up, "Only read-only tools remain available (get_weather, Read)") {
				t.Errorf("request 7 is not restricted: %s", up)
			}
			waitFor(t, "the pause step", func() bool { return e.record(t, "loop").Watch.Step == trajectory.LoopPause })

			// Request 8 is held: the thread is paused for an operator.
			done := make(chan sdkRun, 1)
			go func() { done <- a.step(t, `{"kind":"text","text":"I will stop and report."}`, "", false) }()
			waitFor(t, "the thread paused", func() bool {
				rec := e.record(t, "loop")
				return rec.State == trajectory.Paused && rec.PauseReason == trajectory.PauseLoop
			})
			if n := len(e.mock.Requests()); n != 7 {
				t.Errorf("%d requests reached the provider while paused, want 7", n)
			}
			evs := loopEvents(t, e, "loop")
			steps := make([]trajectory.LoopStep, len(evs))
			for i, ev := range evs {
				steps[i] = ev.Step
				if ev.Signal.Kind != trajectory.SignalRepeatedCall || ev.Signal.Tool != "Bash" || ev.Signal.Digest == 0 ||
					ev.Signal.Digest != evs[0].Signal.Digest || ev.Signal.Count != int64(5+i) {
					t.Errorf("loop event %d: %+v", i, ev)
				}
			}
			if fmt.Sprint(steps) != "[steer restrict pause]" {
				t.Errorf("loop steps %v", steps)
			}

			resp := e.do(t, "POST", "/admin/v1/trajectories/loop/resume", `{"reason":"looked at it"}`, "Authorization", "Bearer "+adminToken)
			if b := readAll(t, resp); resp.StatusCode != http.StatusAccepted {
				t.Fatalf("resume: %d %s", resp.StatusCode, b)
			}
			run = <-done
			if run.failed() || run.text != "I will stop and report." {
				t.Fatalf("request 8 after the resume: %d %s %q", run.status, run.errBody, run.text)
			}
			if up := upstreamBody(t, e, 8); strings.Contains(up, loopNoticeText) || !declares(up, "Bash") {
				t.Errorf("request 8 after the resume still steered or restricted: %s", up)
			}
			waitFor(t, "the turn recorded", func() bool { return e.record(t, "loop").Turns == 8 })
			if w := e.record(t, "loop").Watch; w.Step != "" || len(w.Calls) != 0 || w.ResultsInRow != 0 {
				t.Errorf("watch after the resume: %+v", w)
			}
		})
	}
}

// TestLoopFailEndsRun: with on_loop: fail (a tenant's override), the step
// after restrict ends the run FAILED with exit reason LOOP.
func TestLoopFailEndsRun(t *testing.T) {
	for _, c := range loopClients[:2] {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, envOpts{limits: watchdogOn, teamAExtra: "    watchdog: {on_loop: fail}"})
			a := c.new(e.gk + "/t/doomed" + c.path)
			for i := 1; i <= 7; i++ {
				if run := a.step(t, loopSpec, "same old", false); run.failed() {
					t.Fatalf("request %d: %d %s", i, run.status, run.errBody)
				}
			}
			var rec *trajectory.Record
			waitFor(t, "the run ended", func() bool { rec = e.record(t, "doomed"); return rec.State.Terminal() })
			if rec.State != trajectory.Failed || rec.ExitReason != "LOOP" {
				t.Errorf("record %s %s, want FAILED LOOP", rec.State, rec.ExitReason)
			}
			run := a.step(t, loopSpec, "same old", false)
			if run.status != http.StatusForbidden || !strings.Contains(run.errBody, "FAILED LOOP") {
				t.Errorf("a request after the loop: %d %s", run.status, run.errBody)
			}
			if n := len(e.mock.Requests()); n != 7 {
				t.Errorf("%d requests reached the provider, want 7", n)
			}
			evs := loopEvents(t, e, "doomed")
			if len(evs) != 3 || evs[2].Step != trajectory.LoopFail || evs[2].Signal.Count != 7 {
				t.Errorf("loop events %+v", evs)
			}
		})
	}
}

// TestLoopResultsEscalate: varied calls that keep getting the same result,
// or keep failing, are steered on the request that brings the fifth.
func TestLoopResultsEscalate(t *testing.T) {
	cases := []struct {
		name   string
		result func(i int) (string, bool)
		kind   string
		says   string
	}{
		{"identical results", func(int) (string, bool) { return "bash: make: command not found", false },
			trajectory.SignalRepeatedResult, "Your last 5 tool results were identical."},
		{"consecutive errors", func(i int) (string, bool) { return fmt.Sprintf("error on line %d", i), true },
			trajectory.SignalErrorResults, "Your last 5 tool results were errors."},
	}
	for _, tc := range cases {
		for _, c := range loopClients {
			t.Run(tc.name+" "+c.name, func(t *testing.T) {
				e := newEnv(t, envOpts{limits: watchdogOn})
				a := c.new(e.gk + "/t/rows" + c.path)
				for i := 1; i <= 6; i++ {
					// Request i carries the result of reply i-1.
					result, isErr := tc.result(i)
					if run := a.step(t, variedSpec(i), result, isErr); run.failed() {
						t.Fatalf("request %d: %d %s", i, run.status, run.errBody)
					}
					if notice := strings.Contains(upstreamBody(t, e, i), loopNoticeText); notice != (i == 6) {
						t.Fatalf("request %d: loop notice %v", i, notice)
					}
				}
				if up := upstreamBody(t, e, 6); !strings.Contains(up, tc.says) {
					t.Errorf("request 6 does not say %q: %s", tc.says, up)
				}
				evs := loopEvents(t, e, "rows")
				if len(evs) != 1 || evs[0].Step != trajectory.LoopSteer || evs[0].Signal.Kind != tc.kind || evs[0].Signal.Count != 5 {
					t.Errorf("loop events %+v", evs)
				}
				if len(evs) == 1 && evs[0].Signal.Digest == 0 {
					t.Error("the evidence names no result digest")
				}
			})
		}
	}
}

// TestLoopHealthyRunNotFlagged: 200 turns of ordinary work (reads, edits,
// the test command run again every few turns, some failures, some empty
// results) are never flagged.
func TestLoopHealthyRunNotFlagged(t *testing.T) {
	for _, c := range loopClients[:2] {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, envOpts{limits: watchdogOn})
			a := c.new(e.gk + "/t/healthy" + c.path)
			for i := 1; i <= 200; i++ {
				spec := variedSpec(i)
				result, isErr := fmt.Sprintf("line %d: func parse%d() error {", i, i), false
				switch {
				case i%3 == 0:
					// The same test command after every edit.
					spec = `{"kind":"tool","tools":[{"name":"Bash","input":{"command":"go test ./..."}}]}`
				case i%7 == 0:
					result = "" // a command with no output
				case i%11 == 0:
					spec = `{"kind":"text","text":"Progress so far: parser done, tests next."}`
				}
				if i%4 == 0 {
					result, isErr = fmt.Sprintf("--- FAIL: TestParse%d", i), true
				}
				run := a.step(t, spec, result, isErr)
				if run.failed() {
					t.Fatalf("request %d: %d %s", i, run.status, run.errBody)
				}
				if strings.Contains(upstreamBody(t, e, i), loopNoticeText) {
					t.Fatalf("request %d was steered in a healthy run", i)
				}
			}
			waitFor(t, "every turn recorded", func() bool { return e.record(t, "healthy").Turns == 200 })
			rec := e.record(t, "healthy")
			if evs := loopEvents(t, e, "healthy"); len(evs) != 0 || rec.Watch.Step != "" {
				t.Errorf("a healthy run was flagged: %+v, watch %+v", evs, rec.Watch)
			}
			if len(rec.Watch.Calls) != 8 {
				t.Errorf("the watch keeps %d calls, want the window's 8", len(rec.Watch.Calls))
			}
		})
	}
}

// TestLoopWatchdogOffByDefault: without watchdog.enabled nothing is
// watched, however often a call repeats.
func TestLoopWatchdogOffByDefault(t *testing.T) {
	e := newEnv(t, envOpts{})
	a := newAnthropicAgent(e.gk + "/t/free/anthropic")
	for i := 1; i <= 9; i++ {
		if run := a.step(t, loopSpec, "same", false); run.failed() || len(run.calls) != 1 {
			t.Fatalf("request %d: %d %s %v", i, run.status, run.errBody, run.calls)
		}
		if strings.Contains(upstreamBody(t, e, i), loopNoticeText) {
			t.Fatalf("request %d steered with the watchdog off", i)
		}
	}
	if rec := e.record(t, "free"); !rec.Watch.IsZero() {
		t.Errorf("watch %+v with the watchdog off", rec.Watch)
	}
}
