package deploy_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"gatekeeper/internal/gkproc"
	"gatekeeper/internal/redistest"
)

// gatekeeper is a gatekeeper process started by a test.
type gatekeeper struct {
	base string
	p    *gkproc.Process
}

func (g *gatekeeper) log() string { return g.p.Log() }

// startGatekeeper builds cmd/gatekeeper and serves the deploy config with
// env, on a free loopback port, until the test ends; it is stopped by its
// PID.
func startGatekeeper(t *testing.T, env map[string]string) *gatekeeper {
	t.Helper()
	p := gkproc.Start(t, gkproc.Build(t), configPath, env)
	return &gatekeeper{base: p.Base, p: p}
}

// get fetches path and returns its status and body.
func get(t *testing.T, base, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// TestMetricsServed runs gatekeeper on the deploy config, on a real Redis
// and the built-in mock provider, as the deployments run it; after a
// turn, a failed turn and a refused request (so that the series a turn
// creates exist) every metric the alert rules and the dashboard query is
// on its /metrics, and /healthz and /readyz answer as the probes expect.
// Then the operations metrics move as the alerts need: a call the config's
// gate holds is pending and waiting; with Redis stopped the replica stays
// alive (/healthz), is not ready (/readyz 503), refuses a turn with 503 and
// counts store errors.
func TestMetricsServed(t *testing.T) {
	redis := redistest.StartServer(t)
	env := map[string]string{
		"GATEKEEPER_LISTEN":    "127.0.0.1:0",
		"GATEKEEPER_REDIS_URL": redis.URL,
		"ANTHROPIC_UPSTREAM":   "mock",
		"OPENAI_UPSTREAM":      "mock",
	}
	cfg, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	required, _ := references(t, cfg)
	for _, v := range required {
		if _, ok := env[v]; !ok {
			env[v] = secretValue(v)
		}
	}
	g := startGatekeeper(t, env)

	for _, p := range []struct{ path, body string }{{"/healthz", "ok\n"}, {"/readyz", "ready\n"}} {
		if code, body := get(t, g.base, p.path); code != http.StatusOK || body != p.body {
			t.Errorf("GET %s: %d %q, want 200 %q", p.path, code, body, p.body)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	turn := func(key, text string) error {
		c := anthropic.NewClient(option.WithBaseURL(g.base+"/anthropic"), option.WithAPIKey(key), option.WithMaxRetries(0))
		_, err := c.Messages.New(ctx, anthropic.MessageNewParams{
			Model: "claude-sonnet-4-5", MaxTokens: 256,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))},
		})
		return err
	}
	key := env["GATEKEEPER_TENANT_KEY"]
	if err := turn(key, "hello"); err != nil {
		t.Fatalf("a turn: %v\n%s", err, g.log())
	}
	var apiErr *anthropic.Error
	if err := turn(key, "mock:overloaded"); !errors.As(err, &apiErr) {
		t.Fatalf("a turn the provider refuses: %v", err)
	}
	if err := turn("not-a-virtual-key", "hello"); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a turn with an unknown key: %v, want 401", err)
	}

	// A turn's metrics are recorded as it settles, which may come just
	// after its answer: scrape until the failed turn's count is there (at
	// most 10 s), then check every query against that scrape.
	var exposition string
	served := map[string]bool{}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var code int
		code, exposition = get(t, g.base, "/metrics")
		if code != http.StatusOK {
			t.Fatalf("GET /metrics: %d", code)
		}
		clear(served)
		for _, line := range strings.Split(exposition, "\n") {
			if line == "" || line[0] == '#' {
				continue
			}
			name, _, _ := strings.Cut(line, "{")
			name, _, _ = strings.Cut(name, " ")
			served[name] = true
		}
		if served["gatekeeper_upstream_errors_total"] || time.Now().After(deadline) {
			break
		}
	}

	queries := dashboardQueries(t)
	for _, r := range rules(t) {
		queries = append(queries, query{"alert " + r.Alert, r.Expr})
	}
	for _, q := range queries {
		names := metricNames(q.expr)
		if len(names) == 0 {
			t.Errorf("%s: %q selects no metric", q.where, q.expr)
		}
		for _, n := range names {
			if !served[n] {
				t.Errorf("%s queries %s, which /metrics does not serve", q.where, n)
			}
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", exposition)
	}

	// The operations metrics move on a real gatekeeper: a call held by the
	// config's gate shows as pending, and waiting.
	params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 1024,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("clean the build"))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "Bash",
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"command": map[string]any{"type": "string"}}}}}}}
	held := anthropic.NewClient(option.WithBaseURL(g.base+"/anthropic"), option.WithAPIKey(key), option.WithMaxRetries(0),
		option.WithHeader("X-Mock-Turn", `{"kind":"tool","text":"Cleaning up.","tools":[{"name":"Bash","input":{"command":"rm -rf ./build"}}]}`))
	hctx, hcancel := context.WithCancel(ctx)
	stream := held.Messages.NewStreaming(hctx, params)
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" {
			break
		}
	}
	waited := 0.0
	for i := 0; i < 100 && waited <= 0; i++ {
		time.Sleep(100 * time.Millisecond)
		_, exposition = get(t, g.base, "/metrics")
		waited, _ = sample(exposition, "gatekeeper_approvals_oldest_pending_seconds")
	}
	if waited <= 0 {
		t.Errorf("gatekeeper_approvals_oldest_pending_seconds %v with a call held for 10 s", waited)
	}
	if n, _ := sample(exposition, "gatekeeper_approvals_pending"); n != 1 {
		t.Errorf("gatekeeper_approvals_pending %v with one call held", n)
	}
	hcancel()
	stream.Close()

	// Redis goes away: the replica is alive but not ready (the probes'
	// contract), refuses turns with 503, and counts its store errors.
	if err := redis.Stop(); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, g.base, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d without Redis: a liveness probe would restart every replica in an outage", code)
	}
	if code, body := get(t, g.base, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d %q without Redis, want 503", code, body)
	}
	if err := turn(key, "hello"); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a turn without Redis: %v, want 503", err)
	}
	_, exposition = get(t, g.base, "/metrics")
	if n, ok := sample(exposition, "gatekeeper_store_errors_total"); n < 1 {
		t.Errorf("gatekeeper_store_errors_total %v (served: %t) after Redis stopped", n, ok)
	}
}

// sample is the value of an unlabeled series in an exposition.
func sample(exposition, name string) (float64, bool) {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}
