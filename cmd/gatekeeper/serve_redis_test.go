package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/internal/redistest"
)

// redisConfig writes the repository's example config with the store
// switched to Redis at url.
func redisConfig(t *testing.T, url string) string {
	t.Helper()
	b, err := os.ReadFile("../../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kind := regexp.MustCompile(`(?m)^  kind: memory.*$`)
	if !kind.Match(b) {
		t.Fatal("config.yaml has no store kind line to switch")
	}
	b = kind.ReplaceAll(b, []byte("  kind: redis\n  redis_url: "+url))
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestServeRedis serves a turn with the Redis store and finds its record in
// Redis; with Redis gone, /readyz reports the store unreachable.
func TestServeRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	cfg := redisConfig(t, srv.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-config", cfg}, env("GATEKEEPER_LISTEN", "127.0.0.1:0"), logs, logs)
	}()

	addrRe := regexp.MustCompile(`msg="gatekeeper listening" addr=(\S+) store=redis`)
	var addr string
	for i := 0; i < 500 && addr == ""; i++ {
		if m := addrRe.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	if addr == "" {
		t.Fatalf("gatekeeper did not start with the Redis store:\n%s", logs)
	}
	base := "http://" + addr
	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	readyz := func() int {
		t.Helper()
		resp, err := hc.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := readyz(); code != http.StatusOK {
		t.Fatalf("/readyz = %d with Redis up", code)
	}

	c := anthropic.NewClient(option.WithBaseURL(base+"/t/shared/anthropic"), option.WithAPIKey("gk-demo-key"),
		option.WithMaxRetries(0), option.WithHTTPClient(hc))
	msg, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 256,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}})
	if err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != "end_turn" {
		t.Fatalf("reply %+v", msg)
	}

	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer rdb.Close()
	var rec string
	for i := 0; i < 200; i++ { // the turn is recorded when the reply body closes
		rec, err = rdb.HGet(ctx, "gk:{shared}:rec:shared", "json").Result()
		if err == nil && strings.Contains(rec, `"turns":1,`) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(rec, `"turns":1,`) || !strings.Contains(rec, `"tenant":"demo"`) {
		t.Fatalf("record in Redis: %q, %v", rec, err)
	}
	// The example's keys have limits: the turn was admitted on buckets
	// in the same Redis, named by provider and key name, never the secret.
	buckets, err := rdb.Keys(ctx, "gk:rl:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(buckets) != 1 || buckets[0] != "gk:rl:{anthropic/main}:b" {
		t.Errorf("rate-limit buckets in Redis: %q, want gk:rl:{anthropic/main}:b", buckets)
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if code := readyz(); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d with Redis down, want 503", code)
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
}

// TestServeRedisUnreachable: serve refuses to start when Redis does not
// answer, and says why.
func TestServeRedisUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "redis://" + ln.Addr().String() + "/0"
	ln.Close() // nothing listens there now
	cfg := redisConfig(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	logs := &syncBuffer{}
	start := time.Now()
	err = run(ctx, []string{"serve", "-config", cfg}, env("GATEKEEPER_LISTEN", "127.0.0.1:0"), logs, logs)
	if err == nil || !strings.Contains(err.Error(), "store.kind redis") || !strings.Contains(err.Error(), "unavailable") {
		t.Fatalf("serve with Redis unreachable: %v\n%s", err, logs)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("serve took %v to give up", elapsed)
	}
	if strings.Contains(logs.String(), "gatekeeper listening") {
		t.Errorf("serve listened without its store:\n%s", logs)
	}
}
