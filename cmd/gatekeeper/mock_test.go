package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestMockProviderRateLimit: mock-provider -rpm answers 429 with
// retry-after once a key has used its requests of the minute.
func TestMockProviderRateLimit(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"mock-provider", "-addr", "127.0.0.1:0", "-rpm", "1"}, env(), out, out)
	}()
	addrRe := regexp.MustCompile(`listening on (http://\S+)`)
	var base string
	for i := 0; i < 500 && base == ""; i++ {
		if m := addrRe.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	if base == "" {
		t.Fatalf("mock-provider did not start:\n%s", out)
	}
	turn := func() (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/messages",
			strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("x-api-key", "sk-one")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("retry-after")
	}
	if code, _ := turn(); code != http.StatusOK {
		t.Fatalf("first turn: %d", code)
	}
	if code, retry := turn(); code != http.StatusTooManyRequests || retry != "60" {
		t.Errorf("second turn: %d retry-after %q, want 429 and 60", code, retry)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("mock-provider: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("mock-provider did not stop")
	}
}
