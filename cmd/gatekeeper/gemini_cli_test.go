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
	mock := mockprovider.New(mockprovider.Options{Script: &mockprovider.Script{Turns: map[string]mockprovider.TurnSpec{
		"crawl": {Kind: mockprovider.KindText, Text: strings.Repeat("Still working on it. ", 200), EventDelay: mockprovider.Duration(100 * time.Millisecond)},
	}}})
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

	start := func(traj, key, prompt string) (*syncBuffer, <-chan error) {
		t.Helper()
		home := t.TempDir()
		cmd := geminiRun(t, bin, agentTarget{base: gk.base, traj: traj, prompt: prompt}, home)
		for i, kv := range cmd.Env {
			if strings.HasPrefix(kv, "GEMINI_API_KEY=") {
				cmd.Env[i] = "GEMINI_API_KEY=" + key
			}
		}
		cmd.Dir = t.TempDir()
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() {
			// The agent's process group, by its id; one that exited is
			// not found.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		})
		return out, done
	}
	wait := func(out *syncBuffer, done <-chan error) (string, error) {
		t.Helper()
		select {
		case err := <-done:
			return out.String(), err
		case <-time.After(3 * time.Minute):
			return out.String(), context.DeadlineExceeded
		}
	}
	run := func(traj, key string) (string, error) {
		t.Helper()
		return wait(start(traj, key, "Say hello to the team."))
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

	// Canceled mid-stream: the CLI gets the error chunk gatekeeper ends
	// the stream with and exits failed; the run takes no more turns.
	out2, done := start("gem-cancel", clientKey, "Write a long report. mock:crawl")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		var r struct {
			State string `json:"state"`
		}
		if code, _ := adminJSON(ctx, "GET", gk.base+"/admin/v1/trajectories/gem-cancel", &r); code == 200 && r.State == "CALLING_MODEL" {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the CLI exited (%v) before its stream could be canceled:\n%s", err, tail(out2.String()))
		case <-ctx.Done():
			t.Fatal("the run never called the model")
		case <-time.After(200 * time.Millisecond):
		}
	}
	time.Sleep(500 * time.Millisecond) // a few chunks out
	if code, err := adminJSON(ctx, "POST", gk.base+"/admin/v1/trajectories/gem-cancel/cancel", nil); err != nil || code != 202 {
		t.Fatalf("cancel: %d %v", code, err)
	}
	out, err = wait(out2, done)
	if err == nil || !strings.Contains(out, "ABORTED") && !strings.Contains(strings.ToLower(out), "cancel") {
		t.Fatalf("after cancel the CLI exited %v:\n%s", err, tail(out))
	}
	if reqs := mock.Requests(); !reqs[len(reqs)-1].Canceled && !reqs[len(reqs)-1].Aborted {
		t.Errorf("the provider's stream was not closed: %+v", reqs[len(reqs)-1])
	}
}
