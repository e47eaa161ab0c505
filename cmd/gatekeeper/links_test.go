package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gatekeeper/mockprovider"
)

// TestServeFollowsConversations: through `gatekeeper serve`, a
// conversation that names no session (Qwen Code's Chat, the OpenAI Agents
// SDK's Responses with the history kept by the app) stays one run from
// its first turn to its later ones: the store's conversation links reach
// the proxy through the event stream's wrapper of the store.
func TestServeFollowsConversations(t *testing.T) {
	mock := mockprovider.New(mockprovider.Options{})
	ms := httptest.NewServer(mock)
	t.Cleanup(ms.Close)
	cfg := fmt.Sprintf(`
listen: 127.0.0.1:0
providers:
  - {name: openai, api: openai, base_url: %q, keys: [{name: k, key: sk-upstream-0002}]}
tenants:
  - {name: agents, keys: [%s]}
log: {level: info, format: json}
`, ms.URL, clientKey)
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	gk := startReplica(t, p)

	const tool = `{"kind":"tool","tools":[{"name":"run_command","input":{"command":"ls"}}]}`
	post := func(path, body, turn string) (string, map[string]any) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "POST", gk.base+"/openai/v1/"+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+clientKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Mock-Turn", turn)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if resp.StatusCode != 200 || json.Unmarshal(b, &m) != nil {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		return resp.Header.Get("X-Gatekeeper-Trajectory"), m
	}
	marshal := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	t.Run("responses", func(t *testing.T) {
		const tools = `[{"type":"function","name":"run_command","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}]`
		user := map[string]any{"role": "user", "content": "Clean up the build directory."}
		run1, r1 := post("responses", `{"model":"gpt-4.1","tools":`+tools+`,"input":`+marshal([]any{user})+`}`, tool)
		input := []any{user}
		for _, it := range r1["output"].([]any) {
			input = append(input, it)
			if item := it.(map[string]any); item["type"] == "function_call" {
				input = append(input, map[string]any{"type": "function_call_output", "call_id": item["call_id"], "output": "ok"})
			}
		}
		run2, _ := post("responses", `{"model":"gpt-4.1","tools":`+tools+`,"input":`+marshal(input)+`}`, "text")
		if run1 == "" || run2 != run1 {
			t.Fatalf("the conversation's second turn went to run %q, its first to %q", run2, run1)
		}
	})
	t.Run("chat", func(t *testing.T) {
		const tools = `[{"type":"function","function":{"name":"run_command","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}}]`
		user := map[string]any{"role": "user", "content": "Clean up the build directory."}
		run1, r1 := post("chat/completions", `{"model":"gpt-4.1","tools":`+tools+`,"messages":`+marshal([]any{user})+`}`, tool)
		msg := r1["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
		call := msg["tool_calls"].([]any)[0].(map[string]any)
		messages := []any{user, msg, map[string]any{"role": "tool", "tool_call_id": call["id"], "content": "ok"}}
		run2, _ := post("chat/completions", `{"model":"gpt-4.1","tools":`+tools+`,"messages":`+marshal(messages)+`}`, "text")
		if run1 == "" || run2 != run1 {
			t.Fatalf("the conversation's second turn went to run %q, its first to %q", run2, run1)
		}
	})
}
