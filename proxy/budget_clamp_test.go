package proxy_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"gatekeeper/meter"
	"gatekeeper/trajectory"
)

// seedBudget creates a root record of team-a with budget b.
func (e *env) seedBudget(t *testing.T, id string, b trajectory.Budget) {
	t.Helper()
	rec := trajectory.New(id, "team-a", time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	rec.Budget = b
	if err := e.store.Create(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
}

// eventsOf returns the Data of a record's events of one type.
func (e *env) eventsOf(t *testing.T, id string, typ trajectory.EventType) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ev := range e.events(t, id) {
		if ev.Type != typ {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(ev.Data, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// TestSmallBudgetClampsCallWithoutLimit: a $0.02 run whose first Chat call
// sets no output limit is forwarded with the limit its budget can pay for,
// and charged exactly what the reply's usage costs.
func TestSmallBudgetClampsCallWithoutLimit(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.seedBudget(t, "small", trajectory.Budget{Dollars: 0.02})
	var sent []byte
	c := openai.NewClient(ooption.WithBaseURL(e.gk+"/t/small/openai/v1"), ooption.WithAPIKey(vkA), ooption.WithMaxRetries(0),
		ooption.WithHeader("X-Mock-Turn", `{"kind":"text","text":"the logs show three restarts"}`), ooption.WithMiddleware(capture(&sent)))
	params := openai.ChatCompletionNewParams{Model: "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("summarize the logs")}}
	reply, err := c.Chat.Completions.New(ctxT(t), params)
	if err != nil {
		t.Fatalf("the call was refused: %v", err)
	}
	if gjson.GetBytes(sent, "max_completion_tokens").Exists() || gjson.GetBytes(sent, "max_tokens").Exists() {
		t.Fatalf("the SDK sent a limit: %s", sent)
	}
	table := meter.DefaultTable()
	// What $0.02 pays for after the input at its highest rate.
	want := meter.FitCall([]meter.Level{{ID: "small", Budget: trajectory.Budget{Dollars: 0.02}}}, table.Worst("gpt-4o", int64(len(sent))), false).MaxOutput
	up := lastUpstream(t, e)
	if got := gjson.GetBytes(up, "max_completion_tokens").Int(); got != want || want >= 16384 || want < 1024 {
		t.Errorf("forwarded max_completion_tokens %d, want the clamp %d", got, want)
	}
	var rec *trajectory.Record
	waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "small"); return rec.Turns == 1 })
	u := trajectory.Usage{InputTokens: reply.Usage.PromptTokens - reply.Usage.PromptTokensDetails.CachedTokens,
		CachedInputTokens: reply.Usage.PromptTokensDetails.CachedTokens, OutputTokens: reply.Usage.CompletionTokens}
	charge := table.Cost(reply.Model, u)
	if rec.Spend.Dollars != charge.Dollars() || charge.Micros == 0 || !charge.Priced {
		t.Errorf("charged $%v, the reply's usage %+v costs $%v", rec.Spend.Dollars, u, charge.Dollars())
	}
	if rec.State != trajectory.Ready || rec.Stage != string(meter.Nominal) {
		t.Errorf("record %s stage %s, want READY nominal", rec.State, rec.Stage)
	}
	clamps := e.eventsOf(t, "small", trajectory.EventBudgetClamp)
	if len(clamps) != 1 || clamps[0]["to"] != float64(want) || clamps[0]["from"] != nil || clamps[0]["binding_dimension"] != "dollars" {
		t.Errorf("clamp events %v, want one from none to %d on dollars", clamps, want)
	}
}

// TestClaudeCodeLimitNominalOnFirstTurn: Claude Code sends max_tokens
// 32,000 with a large body; a $1 run is nominal on its first turn and the
// limit goes as sent.
func TestClaudeCodeLimitNominalOnFirstTurn(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.seedBudget(t, "cc", trajectory.Budget{Dollars: 1})
	var sent []byte
	c := anthropic.NewClient(aoption.WithBaseURL(e.gk+"/t/cc/anthropic"), aoption.WithAPIKey(vkA), aoption.WithMaxRetries(0),
		aoption.WithHeader("X-Mock-Turn", `{"kind":"text","text":"done"}`), aoption.WithMiddleware(capture(&sent)))
	system := strings.Repeat("You are Claude Code. Follow the repository's conventions. ", 1300) // about 76 KB, as Claude Code sends
	// Claude Code streams; the SDK refuses a 32,000-token call that does not.
	s := c.Messages.NewStreaming(ctxT(t), anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 32_000,
		System:   []anthropic.TextBlockParam{{Text: system}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("fix the failing test"))}})
	for s.Next() {
	}
	if err := s.Err(); err != nil {
		t.Fatalf("first turn refused: %v", err)
	}
	s.Close()
	if len(sent) < 70_000 {
		t.Fatalf("the request is %d bytes, want Claude Code's size", len(sent))
	}
	if got := gjson.GetBytes(lastUpstream(t, e), "max_tokens").Int(); got != 32_000 {
		t.Errorf("forwarded max_tokens %d, want 32000", got)
	}
	if strings.Contains(string(lastUpstream(t, e)), "budget notice") {
		t.Errorf("a budget notice was appended on the first turn")
	}
	var rec *trajectory.Record
	waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "cc"); return rec.Turns == 1 })
	if rec.Stage != string(meter.Nominal) || rec.BudgetUsed >= 0.7 {
		t.Errorf("after turn 1: stage %s at ρ %.3f, want nominal", rec.Stage, rec.BudgetUsed)
	}
	if n := len(e.eventsOf(t, "cc", trajectory.EventBudgetClamp)); n != 0 {
		t.Errorf("%d clamp events, want none", n)
	}
}

// TestClampKeepsThinkingBelowLimit: a clamped Anthropic call with extended
// thinking goes out with its thinking budget below the new limit.
func TestClampKeepsThinkingBelowLimit(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.seedBudget(t, "think", trajectory.Budget{Dollars: 0.10})
	body := `{"model":"claude-sonnet-4-5","max_tokens":32000,"thinking":{"type":"enabled","budget_tokens":16000},"messages":[{"role":"user","content":"plan the fix"}]}`
	resp := e.do(t, "POST", "/t/think/anthropic/v1/messages", body, hdr("X-Mock-Turn", `{"kind":"text","text":"done"}`)...)
	if b := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	up := lastUpstream(t, e)
	limit, budget := gjson.GetBytes(up, "max_tokens").Int(), gjson.GetBytes(up, "thinking.budget_tokens").Int()
	if limit >= 32000 || limit < 1024 {
		t.Fatalf("max_tokens %d, want a clamp", limit)
	}
	switch typ := gjson.GetBytes(up, "thinking.type").String(); {
	case typ == "enabled" && (budget >= limit || budget < 1024):
		t.Errorf("thinking budget %d with max_tokens %d", budget, limit)
	case typ != "enabled" && typ != "disabled":
		t.Errorf("thinking %s", gjson.GetBytes(up, "thinking").Raw)
	}
}
