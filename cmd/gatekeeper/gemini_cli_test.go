package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gatekeeper/mockprovider"
)

// TestRealGeminiCLI: Gemini CLI, unmodified, through gatekeeper: a plain
// turn is answered and metered; a run whose budget cannot pay for a call
// is refused with gatekeeper's 402 in Google's format, which the CLI
// reports without retrying and without the provider being called. (The
// held calls, approved and denied, are in TestRealClientsHoldPastWatchdog.)
func TestRealGeminiCLI(t *testing.T) {
	bin, ok := agentBinary(t, "gemini")
	if !ok {
		t.Skip("SKIPPED: gemini is not on PATH; install it to run the real-client tests (see .ci/run)")
	}
	mock := mockprovider.New(mockprovider.Options{})
	ms := httptest.NewServer(mock)
	t.Cleanup(ms.Close)
	cfg := fmt.Sprintf(`
listen: 127.0.0.1:0
providers:
  - {name: gemini, api: gemini, base_url: %q, keys: [{name: k, key: goog-upstream-0003}]}
tenants:
  - {name: agents, keys: [%s]}
  - {name: broke, keys: [vk-broke-client-0001], budget: {dollars: 0.000001}}
admin:
  tokens: [{name: carol, token: %s, roles: [operator]}]
log: {level: info, format: json}
`, ms.URL, clientKey, clientApprover)
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	gk := startReplica(t, p)

	run := func(traj, key string) (string, error) {
		t.Helper()
		home := t.TempDir()
		cmd := geminiRun(t, bin, gk.base, traj, home)
		cmd.Args[2] = "Say hello to the team."
		for i, kv := range cmd.Env {
			if strings.HasPrefix(kv, "GEMINI_API_KEY=") {
				cmd.Env[i] = "GEMINI_API_KEY=" + key
			}
		}
		cmd.Dir = t.TempDir()
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			return out.String(), err
		case <-ctx.Done():
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			return out.String(), ctx.Err()
		}
	}

	out, err := run("gem-plain", clientKey)
	if err != nil || !strings.Contains(out, `"response": "You said: `) {
		t.Fatalf("plain turn: %v\n%s\ngatekeeper:\n%s", err, tail(out), tail(gk.logs.String()))
	}
	var rec struct {
		Spend struct {
			Dollars float64 `json:"dollars"`
			Turns   int     `json:"turns"`
		} `json:"spend"`
	}
	code, err := adminJSON(context.Background(), "GET", gk.base+"/admin/v1/trajectories/gem-plain", &rec)
	if err != nil || code != 200 || rec.Spend.Dollars <= 0 || rec.Spend.Turns < 1 {
		t.Errorf("record: %d %v %+v", code, err, rec)
	}

	before := len(mock.Requests())
	out, err = run("gem-broke", "vk-broke-client-0001")
	if err == nil || !strings.Contains(out, "budget") {
		t.Fatalf("over budget: the CLI exited %v:\n%s", err, tail(out))
	}
	if n := len(mock.Requests()) - before; n != 0 {
		t.Errorf("%d requests reached the provider for a run over budget", n)
	}
}
