package outcome

import (
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"

	"gatekeeper/meter"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

func TestOf(t *testing.T) {
	toolUse := []streaming.Stop{{Reason: streaming.StopToolUse}}
	call := streaming.ToolCall{ID: "toolu_1", Name: "bash", Complete: true}
	usage := streaming.Usage{InputTokens: 100, OutputTokens: 20}
	cut := errors.New("connection reset")
	tests := []struct {
		name  string
		facts Facts
		res   streaming.Result
		cause error
		want  Turn
	}{
		{"a whole reply is charged what it reports",
			Facts{BodyBytes: 4000}, streaming.Result{Stops: toolUse, ToolCalls: []streaming.ToolCall{call}, Usage: usage, UsageSeen: true, UsageFinal: true},
			nil, Turn{Stop: "tool_use", Status: 200, Calls: []trajectory.PendingCall{{ID: "toolu_1", Name: "bash"}},
				Usage: trajectory.Usage{InputTokens: 100, OutputTokens: 20}}},
		{"a reply with no stop ended its turn",
			Facts{}, streaming.Result{Usage: usage, UsageSeen: true},
			nil, Turn{Stop: "end_turn", Status: 200, Usage: trajectory.Usage{InputTokens: 100, OutputTokens: 20}}},
		{"a withheld call is not pending, and the agent saw the turn end",
			Facts{Withheld: []streaming.ToolCall{call}}, streaming.Result{Stops: toolUse, ToolCalls: []streaming.ToolCall{call}, Usage: usage, UsageSeen: true},
			nil, Turn{Stop: "end_turn", Status: 200, Usage: trajectory.Usage{InputTokens: 100, OutputTokens: 20}}},
		{"a cut stream is estimated from the request and what streamed",
			Facts{BodyBytes: 401}, streaming.Result{Stops: toolUse, ToolCalls: []streaming.ToolCall{call}, OutputBytes: 81},
			cut, Turn{Stop: "error", Status: 200, Detail: "connection reset", Estimated: true,
				Usage: trajectory.Usage{InputTokens: 101, OutputTokens: 21}}},
		{"a cut stream whose agent went away was canceled",
			Facts{ClientGone: true}, streaming.Result{Usage: usage, UsageSeen: true},
			cut, Turn{Stop: "canceled", Status: 200, Detail: "client went away", Estimated: true,
				Usage: trajectory.Usage{InputTokens: 100, OutputTokens: 20}}},
		{"an operator's stop cancels, whatever else happened",
			Facts{Stopped: Canceled, ClientGone: true}, streaming.Result{Usage: usage, UsageSeen: true},
			nil, Turn{Stop: "canceled", Status: 200, Detail: "stopped by an operator", Estimated: true,
				Usage: trajectory.Usage{InputTokens: 100, OutputTokens: 20}}},
		{"the deadline is an error",
			Facts{Stopped: Deadline}, streaming.Result{Usage: usage, UsageSeen: true},
			nil, Turn{Stop: "error", Status: 200, Detail: "call deadline exceeded", Estimated: true,
				Usage: trajectory.Usage{InputTokens: 100, OutputTokens: 20}}},
		{"a stream without its terminal event is an error",
			Facts{}, streaming.Result{Stops: toolUse, ToolCalls: []streaming.ToolCall{call}, Usage: usage, UsageSeen: true, Truncated: true},
			nil, Turn{Stop: "error", Status: 200, Detail: "upstream stream ended without its terminal event", Estimated: true,
				Usage: trajectory.Usage{InputTokens: 100, OutputTokens: 20}}},
		{"an error event after the opening usage charges at least what streamed",
			Facts{}, streaming.Result{Usage: streaming.Usage{InputTokens: 100, OutputTokens: 1}, UsageSeen: true, OutputBytes: 400,
				Errors: []streaming.ProviderError{{}}},
			nil, Turn{Stop: "end_turn", Status: 200, Estimated: true, Usage: trajectory.Usage{InputTokens: 100, OutputTokens: 100}}},
		{"hosted calls are recorded, never pending",
			Facts{}, streaming.Result{ToolCalls: []streaming.ToolCall{{ItemID: "ws_1", Name: "web_search", Server: true, Complete: true}},
				Usage: usage, UsageSeen: true},
			nil, Turn{Stop: "end_turn", Status: 200, Hosted: []trajectory.PendingCall{{ID: "ws_1", Name: "web_search"}},
				Usage: trajectory.Usage{InputTokens: 100, OutputTokens: 20}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Of(tc.facts, &tc.res, http.StatusOK, tc.cause)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestFailedAndUndelivered(t *testing.T) {
	if o := Failed(errors.New("dial"), false, 10); o.Stop != "error" || !o.Upstream || !o.Estimated || o.Usage.InputTokens != 3 {
		t.Errorf("Failed: %+v", o)
	}
	if o := Failed(errors.New("dial"), true, 10); o.Stop != "canceled" {
		t.Errorf("Failed, agent gone: stop %q", o.Stop)
	}
	o := Undelivered(nil, 40, 8, errors.New("too large"))
	if o.Stop != "error" || o.Upstream || !o.Estimated || o.Usage.InputTokens != 10 || o.Usage.OutputTokens != 2 ||
		o.Detail != "reply not delivered: too large" {
		t.Errorf("Undelivered, no usage: %+v", o)
	}
	o = Undelivered(&streaming.Result{Usage: streaming.Usage{InputTokens: 7, OutputTokens: 1}, UsageSeen: true}, 40, 800, errors.New("x"))
	if o.Estimated || o.Usage.InputTokens != 7 || o.Usage.OutputTokens != 1 {
		t.Errorf("Undelivered, with usage: %+v", o)
	}
	if o := RateLimited(http.StatusServiceUnavailable, errors.New("no key")); !o.RateLimited || !o.Upstream ||
		o.Status != http.StatusServiceUnavailable || o.Detail != "rate limited: no key" {
		t.Errorf("RateLimited: %+v", o)
	}
}

func TestEstimateTokens(t *testing.T) {
	for n, want := range map[int64]int64{0: 0, 1: 1, 4: 1, 5: 2, 4000: 1000} {
		if got := EstimateTokens(n); got != want {
			t.Errorf("EstimateTokens(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestEventData(t *testing.T) {
	o := Turn{Stop: "tool_use", Status: 200, Calls: []trajectory.PendingCall{{ID: "toolu_1", Name: "bash"}}, Detail: "d"}
	data := o.EventData("c1", "m", "anthropic", 1500*time.Millisecond, meter.Charge{Micros: 2500})
	want := TurnData{Call: "c1", Stop: "tool_use", Status: 200, Model: "m", Provider: "anthropic", DurationMS: 1500,
		Dollars: 0.0025, FallbackPriced: true, ToolCalls: o.Calls, Detail: "d"}
	if !reflect.DeepEqual(data, want) {
		t.Errorf("event data %+v, want %+v", data, want)
	}
	raw, err := data.MarshalJSON()
	if wantJSON := `{"call":"c1","detail":"d","dollars":0.0025,"duration_ms":1500,"estimated":false,"fallback_priced":true,` +
		`"model":"m","provider":"anthropic","status":200,"stop":"tool_use","tool_calls":[{"id":"toolu_1","name":"bash"}],` +
		`"usage":{"input_tokens":0,"cached_input_tokens":0,"cache_write_tokens":0,"output_tokens":0}}`; err != nil || string(raw) != wantJSON {
		t.Errorf("event JSON %s, %v; want %s", raw, err, wantJSON)
	}
	o.Upstream = true
	if data := o.EventData("c1", "m", "anthropic", 0, meter.Charge{}); data.FallbackPriced {
		t.Errorf("a provider's error was fallback priced: %+v", data)
	}
	if got := (Turn{}).Ran("requested"); got != "requested" {
		t.Errorf("Ran with no model named = %q", got)
	}
	if got := (Turn{Model: "snapshot"}).Ran("requested"); got != "snapshot" {
		t.Errorf("Ran = %q, want the reply's model", got)
	}
}
