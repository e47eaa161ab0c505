package proxy_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/trajectory"
)

// TestReloadKeepsKeyState: a config reload that keeps a provider key by
// name keeps its rate-limit bucket (a key whose minute is spent stays
// spent), and one that renames it sends the next turn to the new key's
// full bucket; the old key gets nothing new.
func TestReloadKeepsKeyState(t *testing.T) {
	const oldKey, newKey = "sk-reload-key-one", "sk-reload-key-two"
	o := rlOpts{keys: `[{name: k, key: ` + oldKey + `, rpm: 2, rpm_burst: 2}]`, maxWait: "50ms"}
	e := newRLEnv(t, o)
	ctx := ctxT(t)
	status := func(id string) int {
		t.Helper()
		a, err := e.turn(t, ctx, vkStd, id, smallTurn)
		if err != nil {
			t.Fatal(err)
		}
		return a.status
	}
	for i, id := range []string{"r1", "r2"} {
		if got := status(id); got != http.StatusOK {
			t.Fatalf("turn %d within the key's burst: %d", i+1, got)
		}
	}
	if got := status("r3"); got != http.StatusTooManyRequests {
		t.Fatalf("a turn past the key's burst: %d, want 429", got)
	}

	// The same key, by name, after a reload: still spent.
	if err := e.px.Reload(rlConfig(t, e.mockURL, o), nil); err != nil {
		t.Fatal(err)
	}
	if got := status("r4"); got != http.StatusTooManyRequests {
		t.Fatalf("a turn after a reload that kept the key: %d, want 429 (the bucket kept)", got)
	}

	// Renamed: a new bucket, full.
	o.keys = `[{name: k2, key: ` + newKey + `, rpm: 2, rpm_burst: 2}]`
	if err := e.px.Reload(rlConfig(t, e.mockURL, o), nil); err != nil {
		t.Fatal(err)
	}
	if got := status("r5"); got != http.StatusOK {
		t.Fatalf("a turn after a reload that renamed the key: %d, want 200", got)
	}
	reqs := e.mock.Requests()
	if last := reqs[len(reqs)-1]; last.APIKey != newKey {
		t.Errorf("the turn after the rename went on %q, want the new key", last.APIKey)
	}
	for _, r := range reqs {
		if r.APIKey != oldKey && r.APIKey != newKey {
			t.Errorf("the provider saw key %q", r.APIKey)
		}
	}
}

// TestReloadInFlightKeepsItsRules: a turn streaming across a reload is
// charged at the prices it began with; the turn after it at the new ones.
func TestReloadInFlightKeepsItsRules(t *testing.T) {
	const model = "claude-haiku-4-5-20251001"
	const usage = `{"input_tokens":100,"cache_read_input_tokens":0,"cache_creation_input_tokens":0,"output_tokens":50}`
	started, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first := calls.Add(1) == 1
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":%q,\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":%s}}\n\n", model, usage)
		w.(http.Flusher).Flush()
		if first {
			close(started)
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprint(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
		fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\n")
		fmt.Fprint(w, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
		fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":50}}\n\n")
		fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}))
	t.Cleanup(up.Close)
	e := newEnv(t, envOpts{upstream: up.URL})

	done := make(chan []byte, 1)
	go func() {
		resp := e.do(t, "POST", "/t/across/anthropic/v1/messages", anthropicReq(true, "hello"), hdr()...)
		done <- readAll(t, resp)
	}()
	<-started
	// Every model now costs $1,000 per million tokens, in and out.
	next := *e.cfg
	next.Prices = map[string]config.Price{model: {Input: 1000, CachedInput: 1000, CacheWrite: 1000, Output: 1000}}
	if err := e.px.Reload(&next, nil); err != nil {
		t.Fatal(err)
	}
	close(release)
	if b := <-done; !strings.Contains(string(b), "message_stop") {
		t.Fatalf("the stream across the reload: %s", b)
	}
	var rec *trajectory.Record
	waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "across"); return rec.Turns == 1 })
	// claude-haiku-4-5's own prices: $1 input, $5 output per million.
	if got, want := rec.Spend.Dollars, meter.ToDollars(100*1+50*5); got != want {
		t.Fatalf("the turn streaming across the reload was charged $%v, want $%v at the prices it began with", got, want)
	}

	resp := e.do(t, "POST", "/t/after/anthropic/v1/messages", anthropicReq(true, "again"), hdr()...)
	if b := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("the turn after the reload: %d %s", resp.StatusCode, b)
	}
	waitFor(t, "the turn after recorded", func() bool { rec = e.record(t, "after"); return rec.Turns == 1 })
	if got, want := rec.Spend.Dollars, meter.ToDollars(100*1000+50*1000); got != want {
		t.Errorf("the turn after the reload was charged $%v, want $%v at the new prices", got, want)
	}
}
