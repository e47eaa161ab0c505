package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"gatekeeper/internal/redistest"
	"gatekeeper/mockprovider"
)

// TestReplicasShareLoopWatch: an agent stuck on one call, its requests
// alternating between two gatekeeper processes on one Redis, is steered,
// restricted and failed (on_loop: fail) as it would be by one process: the
// watchdog's counters travel with the thread's record.
func TestReplicasShareLoopWatch(t *testing.T) {
	mock := httptest.NewServer(mockprovider.New(mockprovider.Options{}))
	defer mock.Close()
	cfgText := fmt.Sprintf(`
listen: 127.0.0.1:0
store: {kind: redis, redis_url: %q}
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: sk-upstream-0001}]}
tenants:
  - {name: fleet, keys: [%s], read_only_tools: [Read]}
admin:
  tokens: [{name: ops, token: %s, roles: [operator]}]
watchdog: {enabled: true, on_loop: fail}
log: {level: info, format: json}
`, redistest.Start(t), mock.URL, replicaKey, replicaAdmin)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	reps := []*replica{startReplica(t, cfg), startReplica(t, cfg)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const spec = `{"kind":"tool","tools":[{"name":"Bash","input":{"command":"make test"}}]}`
	params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 512,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("make the tests pass"))},
		Tools: []anthropic.ToolUnionParam{
			{OfTool: &anthropic.ToolParam{Name: "Bash", InputSchema: anthropic.ToolInputSchemaParam{
				Properties: map[string]any{"command": map[string]any{"type": "string"}}}}},
			{OfTool: &anthropic.ToolParam{Name: "Read", InputSchema: anthropic.ToolInputSchemaParam{
				Properties: map[string]any{"path": map[string]any{"type": "string"}}}}}}}
	for i := range 8 {
		c := anthropic.NewClient(option.WithBaseURL(reps[i%2].base+"/t/stuck/anthropic"), option.WithAPIKey(replicaKey),
			option.WithMaxRetries(0), option.WithHeader("X-Mock-Turn", spec))
		m, err := c.Messages.New(ctx, params)
		if i == 7 {
			// The seventh identical call ended the run.
			if err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "FAILED LOOP") {
				t.Fatalf("request 8: %v, want 403 for a run FAILED with LOOP", err)
			}
			break
		}
		if err != nil {
			t.Fatalf("request %d through replica %d: %v", i+1, i%2, err)
		}
		params.Messages = append(params.Messages, m.ToParam())
		var results []anthropic.ContentBlockParamUnion
		for _, b := range m.Content {
			if b.Type == "tool_use" {
				results = append(results, anthropic.NewToolResultBlock(b.ID, fmt.Sprintf("FAIL (run %d)", i+1), false))
			}
		}
		if len(results) == 0 {
			results = append(results, anthropic.NewTextBlock("go on"))
		}
		params.Messages = append(params.Messages, anthropic.NewUserMessage(results...))
	}
	var rec struct {
		State      string  `json:"state"`
		ExitReason *string `json:"exit_reason"`
	}
	adminCall(ctx, t, "GET", reps[0].base+"/admin/v1/trajectories/stuck", replicaAdmin, &rec)
	if rec.State != "FAILED" || rec.ExitReason == nil || *rec.ExitReason != "LOOP" {
		t.Fatalf("record %+v, want FAILED LOOP", rec)
	}
	var evs struct {
		Events []struct {
			Type string `json:"type"`
			Data struct {
				Step   string `json:"step"`
				Signal struct {
					Count int `json:"count"`
				} `json:"signal"`
			} `json:"data"`
		} `json:"events"`
	}
	adminCall(ctx, t, "GET", reps[1].base+"/admin/v1/trajectories/stuck/events?limit=1000", replicaAdmin, &evs)
	var steps []string
	for _, ev := range evs.Events {
		if ev.Type == "loop" {
			steps = append(steps, fmt.Sprintf("%s@%d", ev.Data.Step, ev.Data.Signal.Count))
		}
	}
	if got := strings.Join(steps, " "); got != "steer@5 restrict@6 fail@7" {
		t.Errorf("loop steps %q, want steer@5 restrict@6 fail@7", got)
	}
}
