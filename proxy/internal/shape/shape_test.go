package shape

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/meter"
	"gatekeeper/streaming"
	"gatekeeper/streaming/anthropic"
	"gatekeeper/streaming/chat"
)

const anthropicBody = `{"model":"claude-sonnet-4-5","max_tokens":8000,"thinking":{"type":"enabled","budget_tokens":6000},` +
	`"tools":[{"name":"Read","input_schema":{"type":"object"}},{"name":"Bash","input_schema":{"type":"object"}}],` +
	`"messages":[{"role":"user","content":"hi"}]}`

func shape(t *testing.T, body string, r Request) Shaped {
	t.Helper()
	s, err := Shape(context.Background(), slog.New(slog.DiscardHandler), []byte(body), r)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestShape(t *testing.T) {
	tests := []struct {
		name  string
		req   Request
		check func(t *testing.T, s Shaped)
	}{
		{"nominal leaves the body as it is", Request{Dialect: anthropic.Dialect{}, OutputField: "max_tokens", Thinking: true, Asked: 8000}, func(t *testing.T, s Shaped) {
			if string(s.Body) != anthropicBody || s.Restricted || s.StripUsage {
				t.Errorf("body %s restricted %v strip %v, want it untouched", s.Body, s.Restricted, s.StripUsage)
			}
		}},
		{"a clamp lowers the output limit and the thinking budget under it", Request{Dialect: anthropic.Dialect{}, OutputField: "max_tokens", Thinking: true, MaxOut: 3000, Asked: 8000}, func(t *testing.T, s Shaped) {
			if got := gjson.GetBytes(s.Body, "max_tokens").Int(); got != 3000 {
				t.Errorf("max_tokens %d, want 3000", got)
			}
			if got := gjson.GetBytes(s.Body, "thinking.budget_tokens").Int(); got >= 3000 {
				t.Errorf("thinking budget %d, want below 3000", got)
			}
		}},
		{"restrict removes what is not read-only and asks for a final answer", Request{Dialect: anthropic.Dialect{}, OutputField: "max_tokens", Asked: 8000,
			Decision: meter.Decision{Stage: meter.Restrict, Rho: 0.95, Binding: meter.Dollars}, ReadOnly: []string{"Read"}}, func(t *testing.T, s Shaped) {
			if !s.Restricted || len(s.Removed) != 1 || s.Removed[0] != "Bash" {
				t.Errorf("restricted %v removed %v, want Bash removed", s.Restricted, s.Removed)
			}
			if tools := gjson.GetBytes(s.Body, "tools.#.name").String(); tools != `["Read"]` {
				t.Errorf("tools %s, want Read alone", tools)
			}
			if n := gjson.GetBytes(s.Body, "messages.#").Int(); n != 2 {
				t.Errorf("%d messages, want the budget notice appended", n)
			}
		}},
		{"the loop's restrict narrows the tools too, with its notice", Request{Dialect: anthropic.Dialect{}, OutputField: "max_tokens", Asked: 8000,
			LoopNotice: "loop notice", LoopRestrict: true, ReadOnly: []string{"Read"}}, func(t *testing.T, s Shaped) {
			if !s.Restricted || !strings.Contains(string(s.Body), "loop notice") {
				t.Errorf("restricted %v body %s, want restricted with the loop's notice", s.Restricted, s.Body)
			}
		}},
		{"cut replies and an operator's message are put in front of the model", Request{Dialect: anthropic.Dialect{}, OutputField: "max_tokens", Asked: 8000,
			Truncated: 2, Interrupt: "stop and summarise"}, func(t *testing.T, s Shaped) {
			if !strings.Contains(string(s.Body), "[message from the operator] stop and summarise") {
				t.Errorf("body %s, want the operator's message", s.Body)
			}
			if n := gjson.GetBytes(s.Body, "messages.#").Int(); n < 2 {
				t.Errorf("%d messages, want the notices appended", n)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, shape(t, anthropicBody, tc.req)) })
	}
}

func TestShapeAsksChatUsage(t *testing.T) {
	body := `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	s := shape(t, body, Request{Dialect: chat.Dialect{}, OutputField: "max_completion_tokens", AskUsage: true})
	if !s.StripUsage || !gjson.GetBytes(s.Body, "stream_options.include_usage").Bool() {
		t.Fatalf("strip %v body %s, want usage asked on the agent's behalf", s.StripUsage, s.Body)
	}
}

func TestClampOutput(t *testing.T) {
	tests := []struct {
		name    string
		asked   int64
		ceiling int
		want    int64
	}{
		{"neither", 0, 0, 0},
		{"no ceiling", 500, 0, 500},
		{"none asked", 0, 300, 300},
		{"above the ceiling", 500, 300, 300},
		{"below the ceiling", 200, 300, 200},
	}
	for _, tc := range tests {
		if got := ClampOutput(tc.asked, tc.ceiling); got != tc.want {
			t.Errorf("%s: ClampOutput(%d, %d) = %d, want %d", tc.name, tc.asked, tc.ceiling, got, tc.want)
		}
	}
}

func TestRefusalAndGrant(t *testing.T) {
	call := streaming.ToolCall{Name: "Bash"}
	budget := Refusal(meter.Decision{Stage: meter.Restrict, Rho: 0.93, Binding: meter.Dollars})(call)
	if !strings.Contains(budget, "The call to Bash was withheld") || !strings.Contains(budget, "93% of its dollars budget") {
		t.Errorf("budget refusal %q", budget)
	}
	if loop := Refusal(meter.Decision{Stage: meter.Nominal})(call); loop == budget || loop == "" {
		t.Errorf("loop refusal %q, want the watchdog's text", loop)
	}
	g := Grant([]string{"Read"})
	if !g("Read") || g("Bash") {
		t.Error("Grant does not follow its list")
	}
}
