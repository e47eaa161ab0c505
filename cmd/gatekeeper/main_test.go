package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"go.uber.org/goleak"
)

// syncBuffer is a bytes.Buffer safe for the server's log writes and the
// test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// recordStream reads the admin event stream at url with the admin token
// into a buffer from now until stop, or the test's end; the test reads
// what came so far with String. After stop returns, nothing more comes.
func recordStream(t *testing.T, ctx context.Context, url, token string) (stream *syncBuffer, stop func()) {
	stream = &syncBuffer{}
	streamCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(streamCtx, http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		_, _ = io.Copy(stream, resp.Body)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stream, stop
}

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// TestQuickStart runs the README's first command on the repository's own
// config.yaml (built-in mock provider, embedded store), drives a turn with
// the Anthropic SDK, reads the record back with the CLI, and shuts down.
func TestQuickStart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncBuffer{}
	getenv := env("GATEKEEPER_LISTEN", "127.0.0.1:0")
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve", "-config", "../../config.yaml"}, getenv, logs, logs) }()

	addrRe := regexp.MustCompile(`msg="gatekeeper listening" addr=(\S+)`)
	var addr string
	for i := 0; i < 500 && addr == ""; i++ {
		if m := addrRe.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	if addr == "" {
		t.Fatalf("gatekeeper did not start:\n%s", logs)
	}
	base := "http://" + addr
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(base + p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", p, resp, err)
		}
		resp.Body.Close()
	}

	c := anthropic.NewClient(option.WithBaseURL(base+"/t/quick/anthropic"), option.WithAPIKey("gk-demo-key"), option.WithMaxRetries(0))
	s := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 256,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}})
	var msg anthropic.Message
	for s.Next() {
		if err := msg.Accumulate(s.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if len(msg.Content) == 0 || msg.StopReason != "end_turn" {
		t.Fatalf("reply %+v", msg)
	}
	// The turn is counted at /metrics once the record has it.
	for i := 0; ; i++ {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`gatekeeper_turns_total{`)) {
			break
		}
		if i == 200 {
			t.Fatalf("/metrics: %d, no gatekeeper_turns_total:\n%s", resp.StatusCode, body)
		}
		time.Sleep(10 * time.Millisecond)
	}

	cli := env("GATEKEEPER_URL", base, "GATEKEEPER_ADMIN_TOKEN", "dev-admin-token-change-me")
	var out bytes.Buffer
	var rec map[string]any
	for i := 0; i < 200; i++ { // the turn is recorded when the reply body closes
		out.Reset()
		if err := run(ctx, []string{"trajectories", "show", "quick", "-json"}, cli, &out, &out); err != nil {
			t.Fatalf("trajectories show: %v\n%s", err, out.String())
		}
		if err := json.Unmarshal(out.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["turns"] == 1.0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if rec["turns"] != 1.0 || rec["state"] != "READY" || rec["tenant"] != "demo" {
		t.Fatalf("record %v", rec)
	}
	out.Reset()
	if err := run(ctx, []string{"trajectories", "ls"}, cli, &out, &out); err != nil || !strings.Contains(out.String(), "quick") {
		t.Fatalf("trajectories ls: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"trajectories", "ls"}, env("GATEKEEPER_URL", base, "GATEKEEPER_ADMIN_TOKEN", "wrong-token-wrong"), &out, &out); err == nil {
		t.Fatal("a wrong admin token was accepted")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(`
providers:
  - {name: admin, api: bedrock, base_url: "ftp://x", keys: []}
tenants:
  - {name: a, keys: ["${MISSING_KEY}"], priority: urgent}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		ok         bool
		want       []string
	}{
		{"repository example", "../../config.yaml", true, []string{"ok"}},
		{"every problem listed", bad, false, []string{"providers[0].name", "providers[0].api", "providers[0].base_url",
			"providers[0].keys", "MISSING_KEY", "tenants[0].priority"}},
		{"missing file", filepath.Join(dir, "none.yaml"), false, []string{"none.yaml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), []string{"check-config", "-config", tc.path}, env(), &out, &out)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v\n%s", err, out.String())
			}
			text := out.String()
			if err != nil && !errors.Is(err, errReported) {
				text += err.Error()
			}
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("output lacks %q:\n%s", w, text)
				}
			}
		})
	}
}

func TestUnknownCommand(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"frobnicate"}, env(), &out, &out); err == nil || !strings.Contains(out.String(), "usage") {
		t.Fatalf("err %v, output %q", err, out.String())
	}
}
