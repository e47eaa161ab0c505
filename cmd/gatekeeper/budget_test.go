package main

import (
	"bytes"
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

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"gatekeeper/mockprovider"
)

// TestBudgetPauseRaisedThroughAPIAndCLI runs a gatekeeper process whose
// tenant pauses runs that exhaust their budget: a call the budget cannot
// pay for is held with its run PAUSED (reason BUDGET), and raising the
// budget, through the admin API on one run and the command line on
// another, lets the held call through, and the next one.
func TestBudgetPauseRaisedThroughAPIAndCLI(t *testing.T) {
	mock := httptest.NewServer(mockprovider.New(mockprovider.Options{}))
	defer mock.Close()
	const admin = "budget-admin-token-0001"
	const key = "vk-budget-test-0001"
	// $0.016 pays for one call of max_tokens 1024 at claude-sonnet-4-5's
	// $15 per million output tokens; after a reply of some 450 tokens
	// ($0.007) it cannot pay for another.
	cfgText := fmt.Sprintf(`
listen: 127.0.0.1:0
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: sk-upstream-0001}]}
tenants:
  - name: fleet
    keys: [%s]
    budget: {dollars: 0.016, on_exhaust: pause}
admin:
  tokens: [{name: ops, token: %s, roles: [operator]}]
limits: {pause_hold: 60s}
log: {level: info, format: json}
`, mock.URL, key, admin)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := startReplica(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	getenv := func(k string) string {
		return map[string]string{"GATEKEEPER_URL": rep.base, "GATEKEEPER_ADMIN_TOKEN": admin}[k]
	}
	type record struct {
		State       string `json:"state"`
		PauseReason string `json:"pause_reason"`
		Stage       string `json:"stage"`
		Turns       int64  `json:"turns"`
		Budget      struct {
			Dollars float64 `json:"dollars"`
		} `json:"budget"`
	}
	show := func(id string) record {
		var out bytes.Buffer
		if err := run(ctx, []string{"trajectories", "show", id, "-json"}, getenv, &out, io.Discard); err != nil {
			t.Fatalf("show %s: %v", id, err)
		}
		var r record
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	reply := fmt.Sprintf(`{"kind":"text","text":%q}`, strings.Repeat("The logs show three restarts. ", 60))
	call := func(id string) error {
		c := anthropic.NewClient(option.WithBaseURL(rep.base), option.WithAPIKey(key), option.WithMaxRetries(0),
			option.WithHeader("X-Gatekeeper-Trajectory", id), option.WithHeader("X-Mock-Turn", reply))
		_, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 1024,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("summarize the logs"))}})
		return err
	}
	raises := map[string]func(id string){
		"api": func(id string) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPatch, rep.base+"/admin/v1/trajectories/"+id+"/budget",
				strings.NewReader(`{"dollars": 5, "reason": "approved by finance"}`))
			req.Header.Set("Authorization", "Bearer "+admin)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("PATCH budget: %d %s", resp.StatusCode, b)
			}
		},
		"cli": func(id string) {
			var out, errOut bytes.Buffer
			if err := run(ctx, []string{"trajectories", "budget", id, "--dollars", "5"}, getenv, &out, &errOut); err != nil {
				t.Fatalf("trajectories budget: %v\n%s", err, errOut.String())
			}
			if !strings.Contains(out.String(), "$5,") {
				t.Errorf("the CLI printed no new budget:\n%s", out.String())
			}
		},
	}
	for name, raise := range raises {
		t.Run(name, func(t *testing.T) {
			id := "run-pause-" + name
			if err := call(id); err != nil {
				t.Fatalf("first call: %v", err)
			}
			held := make(chan error, 1)
			go func() { held <- call(id) }()
			var r record
			for i := 0; i < 600; i++ {
				if r = show(id); r.State == "PAUSED" {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if r.State != "PAUSED" || r.PauseReason != "BUDGET" {
				t.Fatalf("run %s (%s), want PAUSED for BUDGET", r.State, r.PauseReason)
			}
			select {
			case err := <-held:
				t.Fatalf("the call the budget could not pay for was answered: %v", err)
			default:
			}
			raise(id)
			if err := <-held; err != nil {
				t.Fatalf("held call after the raise: %v", err)
			}
			if err := call(id); err != nil {
				t.Fatalf("next call: %v", err)
			}
			if r = show(id); r.State != "READY" || r.Turns != 3 || r.Budget.Dollars != 5 || r.PauseReason != "" {
				t.Errorf("after the raise: %+v, want READY with 3 turns and $5", r)
			}
		})
	}
}
