package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

const (
	slowKey    = "vk-slow-conns-test-0001"
	slowAdmin  = "slow-conns-admin-token-01"
	slowSecret = "slow-conns-signing-secret-01"
)

var slowYAML = `
listen: 127.0.0.1:0
store: {kind: memory}
providers:
  - {name: anthropic, api: anthropic, base_url: mock, default: true, keys: [{name: main, key: sk-mock-1}]}
prices:
  claude-sonnet-4-5: {input: 3, output: 15}
tenants:
  - {name: team-a, keys: [` + slowKey + `]}
admin:
  tokens: [{name: ops, token: ` + slowAdmin + `, roles: [operator]}]
gates:
  - {name: shell, when: 'tool.name == "Bash"', approvers: {roles: [secops]}}
approvals:
  slack:
    bot_token: xoxb-slow-test
    signing_secret: ` + slowSecret + `
    channel: "#approvals"
    api_url: http://127.0.0.1:1/api
    users: [{slack_id: U1, name: carol, roles: [secops]}]
limits: {body_timeout: 2s}
log: {level: info}
`

// slowClients keeps n connections open on addr, each sending the start
// of a request and never the rest: a quarter the head of a Slack delivery,
// a quarter its headers and a trickle of its body, and the same on the
// admin API. A connection the server closes is opened again about a
// second later, until ctx ends. It returns how many connections were
// made.
func slowClients(ctx context.Context, addr string, n int) *atomic.Int64 {
	starts := []string{
		"POST /hooks/slack/interactions HTTP/1.1\r\nHost: gk\r\nContent-Type: application/x-www-form-urlencoded\r\n",
		"POST /hooks/slack/interactions HTTP/1.1\r\nHost: gk\r\nContent-Length: 5000\r\n\r\npayload=%7B",
		"GET /admin/v1/trajectories HTTP/1.1\r\nHost: gk\r\nAuthori",
		"POST /admin/v1/trajectories HTTP/1.1\r\nHost: gk\r\nContent-Length: 5000\r\n\r\n{\"tenant\":",
	}
	var made atomic.Int64
	for i := range n {
		go func() {
			for ctx.Err() == nil {
				c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
				if err == nil {
					made.Add(1)
					_, _ = io.WriteString(c, starts[i%len(starts)])
					stop := context.AfterFunc(ctx, func() { _ = c.Close() })
					_, _ = io.Copy(io.Discard, c) // until the server closes it
					stop()
					_ = c.Close()
				}
				// Again after about a second, as a client that keeps its
				// connections open checks on them, spread so that the
				// clients do not come back all at once.
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(500+rand.IntN(1000)) * time.Millisecond):
				}
			}
		}()
	}
	return &made
}

// openFiles counts the descriptors process pid has open.
func openFiles(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// TestSlowConnectionsLeaveRoom runs gatekeeper as a child process limited
// to 256 open files while 500 clients hold connections to the Slack hook
// and the admin API without ever finishing a request (and reconnect when
// closed): /healthz and a turn are answered within 1 s throughout, and
// the process never reaches its limit.
func TestSlowConnectionsLeaveRoom(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gatekeeper process and 500 connections")
	}
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(slowYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	// limits.body_timeout is 2 s (the default is 60 s): slow bodies are
	// also ended by their deadline, not only closed to make room.
	rep := startReplica(t, cfg, noFileEnv+"=256")
	addr := strings.TrimPrefix(rep.base, "http://")

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	made := slowClients(ctx, addr, 500)
	for deadline := time.Now().Add(20 * time.Second); made.Load() < 500; {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of 500 slow connections were made", made.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}

	probe := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	agent := anthropic.NewClient(option.WithBaseURL(rep.base), option.WithAPIKey(slowKey), option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Timeout: 5 * time.Second}))
	var worstHealth, worstTurn time.Duration
	maxFiles := 0
	const rounds = 40 // about 8 s of probing
	for i := range rounds {
		start := time.Now()
		res, err := probe.Get(rep.base + "/healthz")
		d := time.Since(start)
		if err != nil {
			t.Errorf("round %d: /healthz: %v after %s", i, err, d)
			continue
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || d > time.Second {
			t.Errorf("round %d: /healthz answered %d after %s", i, res.StatusCode, d)
		}
		worstHealth = max(worstHealth, d)

		start = time.Now()
		tctx, tcancel := context.WithTimeout(context.Background(), 5*time.Second)
		msg, err := agent.Messages.New(tctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(fmt.Sprintf("round %d", i)))}})
		tcancel()
		d = time.Since(start)
		if err != nil {
			t.Errorf("round %d: turn: %v after %s", i, err, d)
			continue
		}
		if len(msg.Content) == 0 || d > time.Second {
			t.Errorf("round %d: turn answered %v after %s", i, msg.Content, d)
		}
		worstTurn = max(worstTurn, d)
		maxFiles = max(maxFiles, openFiles(rep.cmd.Process.Pid))
		time.Sleep(200 * time.Millisecond)
	}
	if made.Load() < 1000 {
		t.Errorf("%d connections made by 500 clients: the server kept the slow ones open", made.Load())
	}
	if maxFiles >= 256 {
		t.Errorf("the process had %d files open: at its limit", maxFiles)
	}
	logs := rep.logs.String()
	if !strings.Contains(logs, "connection without authentication closed to make room") {
		t.Errorf("no pending connection was closed for a newer one; logs:\n%s", logs)
	}
	if strings.Contains(logs, "too many open files") {
		t.Errorf("the process ran out of file descriptors; logs:\n%s", logs)
	}
	t.Logf("%d slow connections made in all; worst /healthz %s, worst turn %s; at most %d files open of 256",
		made.Load(), worstHealth, worstTurn, maxFiles)
}
