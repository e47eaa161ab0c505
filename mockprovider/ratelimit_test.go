package mockprovider

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// stepClock is a clock that moves only when the test says.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

const limitedTurn = `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`

// postKey sends an Anthropic turn with key and returns the status, the
// headers and the body.
func postKey(t *testing.T, url, key, body string, headers ...string) (int, http.Header, []byte) {
	t.Helper()
	resp := post(t, context.Background(), url+"/v1/messages", body, append([]string{"x-api-key", key}, headers...)...)
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func TestRateLimitRequests(t *testing.T) {
	clock := &stepClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	s, url := newMock(t, Options{Clock: clock.Now, RateLimit: RateLimit{RPM: 3}})
	for i := range 3 {
		code, h, _ := postKey(t, url, "sk-a", limitedTurn)
		if code != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200", i, code)
		}
		if got, want := h.Get("anthropic-ratelimit-requests-remaining"), strconv.Itoa(2-i); got != want {
			t.Errorf("request %d: requests-remaining %q, want %q", i, got, want)
		}
		if h.Get("anthropic-ratelimit-requests-limit") != "3" {
			t.Errorf("request %d: requests-limit %q, want 3", i, h.Get("anthropic-ratelimit-requests-limit"))
		}
	}
	code, h, body := postKey(t, url, "sk-a", limitedTurn)
	if code != http.StatusTooManyRequests {
		t.Fatalf("fourth request: status %d, want 429", code)
	}
	// One request refills in a third of the minute.
	if h.Get("retry-after") != "20" {
		t.Errorf("retry-after %q, want 20", h.Get("retry-after"))
	}
	var e struct {
		Type  string                `json:"type"`
		Error struct{ Type string } `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Type != "error" || e.Error.Type != "rate_limit_error" {
		t.Errorf("429 body %s is not Anthropic's rate_limit_error (%v)", body, err)
	}
	// Another key has its own buckets.
	if code, _, _ := postKey(t, url, "sk-b", limitedTurn); code != http.StatusOK {
		t.Errorf("another key: status %d, want 200", code)
	}
	clock.add(20 * time.Second)
	if code, _, _ := postKey(t, url, "sk-a", limitedTurn); code != http.StatusOK {
		t.Errorf("after the refill: status %d, want 200", code)
	}
	if code, _, _ := postKey(t, url, "sk-a", limitedTurn); code != http.StatusTooManyRequests {
		t.Errorf("refilled one, took two: status %d, want 429", code)
	}
	if got, want := s.RateCounts(), (RateCounts{Served: 5, Limited: 2, InputTokens: s.RateCounts().InputTokens, OutputTokens: s.RateCounts().OutputTokens}); got != want || got.InputTokens <= 0 {
		t.Errorf("counts %+v, want 5 served, 2 limited and the tokens charged", got)
	}
	s.Reset()
	if got := s.RateCounts(); got != (RateCounts{}) {
		t.Errorf("counts after Reset %+v, want zero", got)
	}
	if code, _, _ := postKey(t, url, "sk-a", limitedTurn); code != http.StatusOK {
		t.Errorf("after Reset: status %d, want 200 (buckets refilled)", code)
	}
}

func TestRateLimitTokens(t *testing.T) {
	clock := &stepClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	s, url := newMock(t, Options{Clock: clock.Now, RateLimit: RateLimit{InputTPM: 1000, OutputTPM: 100, Window: time.Second}})
	big := `{"usage":{"input_tokens":900,"output_tokens":10}}`
	code, h, _ := postKey(t, url, "sk-a", limitedTurn, HeaderTurn, big)
	if code != http.StatusOK {
		t.Fatalf("first turn: status %d", code)
	}
	if got := h.Get("anthropic-ratelimit-input-tokens-remaining"); got != "100" {
		t.Errorf("input-tokens-remaining %q, want 100", got)
	}
	if got := h.Get("anthropic-ratelimit-output-tokens-remaining"); got != "90" {
		t.Errorf("output-tokens-remaining %q, want 90", got)
	}
	code, h, _ = postKey(t, url, "sk-a", limitedTurn, HeaderTurn, big)
	if code != http.StatusTooManyRequests {
		t.Fatalf("second turn over the input limit: status %d, want 429", code)
	}
	if h.Get("retry-after") != "1" {
		t.Errorf("retry-after %q, want 1 (800 tokens at 1000 a second, rounded up)", h.Get("retry-after"))
	}
	clock.add(time.Second)
	// Output is charged as the turn's usage says, so a turn may overdraw
	// it; the next one is refused until the bucket refills.
	if code, _, _ := postKey(t, url, "sk-a", limitedTurn, HeaderTurn, `{"usage":{"input_tokens":1,"output_tokens":300}}`); code != http.StatusOK {
		t.Fatalf("turn overdrawing output: status %d, want 200", code)
	}
	if code, _, _ := postKey(t, url, "sk-a", limitedTurn, HeaderTurn, `{"usage":{"input_tokens":1,"output_tokens":1}}`); code != http.StatusTooManyRequests {
		t.Errorf("turn while output is overdrawn: status %d, want 429", code)
	}
	if got := s.RateCounts(); got.Served != 2 || got.Limited != 2 || got.InputTokens != 901 || got.OutputTokens != 310 {
		t.Errorf("counts %+v, want 2 served (901 in, 310 out), 2 limited", got)
	}
}

func TestRateLimitOpenAIHeaders(t *testing.T) {
	clock := &stepClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	_, url := newMock(t, Options{Clock: clock.Now, RateLimit: RateLimit{RPM: 1, InputTPM: 600}})
	chat := `{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}`
	resp := post(t, context.Background(), url+"/v1/chat/completions", chat)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	h := resp.Header
	if h.Get("x-ratelimit-limit-requests") != "1" || h.Get("x-ratelimit-remaining-requests") != "0" ||
		h.Get("x-ratelimit-reset-requests") != "1m0s" || h.Get("x-ratelimit-limit-tokens") != "600" {
		t.Errorf("rate-limit headers %v", h)
	}
	resp = post(t, context.Background(), url+"/v1/chat/completions", chat)
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	if resp.StatusCode != http.StatusTooManyRequests || json.Unmarshal(b, &e) != nil || e.Error.Code != "rate_limit_exceeded" ||
		resp.Header.Get("retry-after") != "60" {
		t.Errorf("second request: %d %s retry-after %q, want 429 rate_limit_exceeded, 60", resp.StatusCode, b, resp.Header.Get("retry-after"))
	}
}

// TestRateLimitQuantum: with a Quantum, a key's bucket holds only that
// share of its per-minute limit and refills at the limit per minute: 600
// a minute with a Quantum of 1s admits 10 at once, then one every 100ms.
func TestRateLimitQuantum(t *testing.T) {
	clock := &stepClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	s, url := newMock(t, Options{Clock: clock.Now, RateLimit: RateLimit{RPM: 600, Quantum: time.Second}})
	for i := range 10 {
		code, h, _ := postKey(t, url, "sk-q", limitedTurn)
		if code != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200", i, code)
		}
		if got, want := h.Get("anthropic-ratelimit-requests-remaining"), strconv.Itoa(9-i); got != want {
			t.Errorf("request %d: requests-remaining %q, want %q", i, got, want)
		}
		if got := h.Get("anthropic-ratelimit-requests-limit"); got != "600" {
			t.Errorf("request %d: requests-limit %q, want the per-minute 600", i, got)
		}
	}
	code, h, _ := postKey(t, url, "sk-q", limitedTurn)
	if code != http.StatusTooManyRequests {
		t.Fatalf("the 11th request in the same instant: status %d, want 429", code)
	}
	if got := h.Get("retry-after"); got != "1" {
		t.Errorf("retry-after %q, want 1 (at least a second)", got)
	}
	clock.add(100 * time.Millisecond)
	if code, _, _ := postKey(t, url, "sk-q", limitedTurn); code != http.StatusOK {
		t.Fatalf("100ms later: status %d, want 200 (one came back)", code)
	}
	if code, _, _ := postKey(t, url, "sk-q", limitedTurn); code != http.StatusTooManyRequests {
		t.Fatalf("a second one 100ms later: status %d, want 429", code)
	}
	clock.add(time.Hour)
	if code, h, _ := postKey(t, url, "sk-q", limitedTurn); code != http.StatusOK || h.Get("anthropic-ratelimit-requests-remaining") != "9" {
		t.Fatalf("after an hour: status %d, remaining %q; want 200 and 9 (never above the quantum)", code, h.Get("anthropic-ratelimit-requests-remaining"))
	}
	if c := s.RateCounts(); c.Served != 12 || c.Limited != 2 {
		t.Errorf("counts %+v, want 12 served and 2 limited", c)
	}
}

// TestAdvertisedRequestsPerMinute: without RateLimit the headers advertise
// Options.RequestsPerMinute (DefaultRequestsPerMinute when 0) and count
// down what is left of it in the minute, none past it, all of it again in
// the next minute; the turns are served all the same.
func TestAdvertisedRequestsPerMinute(t *testing.T) {
	for _, c := range []struct {
		name  string
		rpm   int
		limit int
	}{
		{"default", 0, DefaultRequestsPerMinute},
		{"set", 3, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := &stepClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
			_, url := newMock(t, Options{Clock: clock.Now, RequestsPerMinute: c.rpm})
			check := func(what string, wantLeft int) {
				t.Helper()
				code, h, _ := postKey(t, url, "sk-a", limitedTurn)
				if code != http.StatusOK {
					t.Fatalf("%s: status %d, want 200", what, code)
				}
				if got := h.Get("anthropic-ratelimit-requests-limit"); got != strconv.Itoa(c.limit) {
					t.Errorf("%s: requests-limit %q, want %d", what, got, c.limit)
				}
				if got := h.Get("anthropic-ratelimit-requests-remaining"); got != strconv.Itoa(wantLeft) {
					t.Errorf("%s: requests-remaining %q, want %d", what, got, wantLeft)
				}
			}
			for i := range 4 {
				check("request "+strconv.Itoa(i), max(0, c.limit-1-i))
			}
			clock.add(time.Minute)
			check("the next minute's first request", c.limit-1)
		})
	}
}
