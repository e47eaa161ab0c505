package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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

const approverToken = "replica-approver-token-0001"

// escrowReplicaConfig is two replicas' config: Redis for records and
// approvals, a gate on destructive shell commands.
func escrowReplicaConfig(t *testing.T, r redistest.Target, mockURL string) string {
	t.Helper()
	cfgText := fmt.Sprintf(`
listen: 127.0.0.1:0
store: %s
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: sk-upstream-0001}]}
tenants:
  - name: fleet
    keys: [%s]
gates:
  - name: destructive-shell
    when: 'tool.name == "Bash" && tool.input.command.matches("rm -rf")'
    approvers: {roles: [secops], quorum: 1}
approvals:
  keepalive: 50ms
admin:
  tokens:
    - {name: ops, token: %s, roles: [operator]}
    - {name: carol, token: %s, roles: ["approver:secops"]}
log: {level: info, format: json}
`, storeYAML(r), mockURL, replicaKey, replicaAdmin, approverToken)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// adminCall sends an admin API request and decodes the JSON answer.
func adminCall(ctx context.Context, t *testing.T, method, url, token string, out any) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(""))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, b)
		}
	}
	return resp.StatusCode
}

// TestEscrowSurvivesRestart: a call is held by process A; A is killed; the
// agent retries the same turn against process B (same Redis), which
// re-attaches to the held turn; the approval is given through B; the
// client gets the call exactly once, and the model was called once. It
// runs on one Redis and on a cluster.
func TestEscrowSurvivesRestart(t *testing.T) {
	redistest.Each(t, testEscrowSurvivesRestart)
}

func testEscrowSurvivesRestart(t *testing.T, r redistest.Target) {
	mock := mockprovider.New(mockprovider.Options{})
	ms := httptest.NewServer(mock)
	defer ms.Close()
	cfg := escrowReplicaConfig(t, r, ms.URL)
	a, b := startReplica(t, cfg), startReplica(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	spec := `{"kind":"tool","first_only":true,"text":"Cleaning up now.","tools":[{"name":"Bash","input":{"command":"rm -rf ./build"}}]}`
	params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 1024,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("clean the build"))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "Bash",
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"command": map[string]any{"type": "string"}}}}}}}
	client := func(base string) anthropic.Client {
		return anthropic.NewClient(option.WithBaseURL(base+"/t/restart/anthropic"), option.WithAPIKey(replicaKey),
			option.WithMaxRetries(0), option.WithHeader("X-Mock-Turn", spec))
	}

	// The first attempt, on A, is held after its text.
	ca := client(a.base)
	sa := ca.Messages.NewStreaming(ctx, params)
	defer sa.Close()
	sawText := false
	for !sawText && sa.Next() {
		ev := sa.Current()
		if ev.Type == "content_block_start" && ev.ContentBlock.Type == "tool_use" {
			t.Fatal("the gated call reached the client before approval")
		}
		sawText = ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta"
	}
	if !sawText {
		t.Fatalf("no text before the hold: %v", sa.Err())
	}
	var list struct {
		Approvals []struct {
			ID     string `json:"id"`
			CallID string `json:"call_id"`
		} `json:"approvals"`
	}
	for i := 0; i < 200 && len(list.Approvals) == 0; i++ {
		adminCall(ctx, t, "GET", b.base+"/admin/v1/approvals?state=pending&trajectory=restart", replicaAdmin, &list)
		time.Sleep(50 * time.Millisecond)
	}
	if len(list.Approvals) != 1 {
		t.Fatalf("pending requests seen through B: %+v", list.Approvals)
	}
	apr := list.Approvals[0]

	// A dies with the call held.
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for sa.Next() {
		if ev := sa.Current(); ev.Type == "content_block_start" && ev.ContentBlock.Type == "tool_use" {
			t.Fatal("the gated call reached the client from the killed process")
		}
	}
	if sa.Err() == nil {
		t.Fatal("the stream from the killed process ended cleanly")
	}

	// The agent retries the same turn on B, which re-attaches to the hold.
	type result struct {
		m   anthropic.Message
		err error
	}
	got := make(chan result, 1)
	go func() {
		cb := client(b.base)
		s := cb.Messages.NewStreaming(ctx, params)
		defer s.Close()
		var m anthropic.Message
		for s.Next() {
			if err := m.Accumulate(s.Current()); err != nil {
				got <- result{err: err}
				return
			}
		}
		got <- result{m, s.Err()}
	}()
	for i := 0; i < 200 && !strings.Contains(b.logs.String(), "request re-attached to a held turn"); i++ {
		time.Sleep(25 * time.Millisecond)
	}
	if !strings.Contains(b.logs.String(), "request re-attached to a held turn") {
		t.Fatalf("B did not re-attach the retry:\n%s", b.logs)
	}
	if code := adminCall(ctx, t, "POST", b.base+"/admin/v1/approvals/"+apr.ID+"/approve", approverToken, nil); code != 200 {
		t.Fatalf("approve through B: %d", code)
	}
	var res result
	select {
	case res = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the retry got no reply")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	var calls []anthropic.ContentBlockUnion
	for _, blk := range res.m.Content {
		if blk.Type == "tool_use" {
			calls = append(calls, blk)
		}
	}
	if len(calls) != 1 || calls[0].ID != apr.CallID || calls[0].Name != "Bash" || string(calls[0].Input) != `{"command":"rm -rf ./build"}` {
		t.Fatalf("released message %+v", res.m.Content)
	}

	// A third attempt gets no second delivery.
	cb := client(b.base)
	_, err := cb.Messages.New(ctx, params)
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusConflict {
		t.Fatalf("third attempt: %v, want 409", err)
	}
	turns := 0
	for _, r := range mock.Requests() {
		if r.API != "" {
			turns++
		}
	}
	if turns != 1 {
		t.Fatalf("the mock saw %d model calls for the turn, want 1", turns)
	}
}

// TestEscrowGracefulShutdown: a process asked to stop while it holds a
// call ends the held stream at once (the agent retries elsewhere), exits
// cleanly, and leaves the hold pending in Redis for that retry.
func TestEscrowGracefulShutdown(t *testing.T) {
	srv := redistest.StartServer(t)
	ms := httptest.NewServer(mockprovider.New(mockprovider.Options{}))
	defer ms.Close()
	cfg := escrowReplicaConfig(t, redistest.Target{URL: srv.URL}, ms.URL)
	a, b := startReplica(t, cfg), startReplica(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	spec := `{"kind":"tool","first_only":true,"text":"Cleaning up now.","tools":[{"name":"Bash","input":{"command":"rm -rf ./build"}}]}`
	params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 1024,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("clean the build"))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "Bash",
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"command": map[string]any{"type": "string"}}}}}}}
	ca := anthropic.NewClient(option.WithBaseURL(a.base+"/t/drain/anthropic"), option.WithAPIKey(replicaKey),
		option.WithMaxRetries(0), option.WithHeader("X-Mock-Turn", spec))
	sa := ca.Messages.NewStreaming(ctx, params)
	defer sa.Close()
	for sa.Next() {
		if ev := sa.Current(); ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" {
			break
		}
	}
	var list struct {
		Approvals []struct {
			ID string `json:"id"`
		} `json:"approvals"`
	}
	for i := 0; i < 200 && len(list.Approvals) == 0; i++ {
		adminCall(ctx, t, "GET", b.base+"/admin/v1/approvals?state=pending&trajectory=drain", replicaAdmin, &list)
		time.Sleep(50 * time.Millisecond)
	}
	if len(list.Approvals) != 1 {
		t.Fatalf("pending requests: %+v", list.Approvals)
	}

	if err := a.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- a.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("process exited with %v:\n%s", err, a.logs)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("process did not exit while holding a call")
	}
	for sa.Next() {
		if ev := sa.Current(); ev.Type == "content_block_start" && ev.ContentBlock.Type == "tool_use" {
			t.Fatal("the held call was delivered at shutdown")
		}
	}
	if sa.Err() == nil {
		t.Fatal("the held stream ended cleanly at shutdown; the agent would not retry")
	}
	var still struct {
		State string `json:"state"`
	}
	if code := adminCall(ctx, t, "GET", b.base+"/admin/v1/approvals/"+list.Approvals[0].ID, replicaAdmin, &still); code != 200 || still.State != "pending" {
		t.Fatalf("request after shutdown: %d %+v", code, still)
	}
}
