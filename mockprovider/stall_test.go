package mockprovider

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// A stall is waited once, before the event it names, on top of the
// event delay: the model pauses mid-reply.
func TestStreamStall(t *testing.T) {
	var mu sync.Mutex
	var waits []time.Duration
	srv := httptest.NewServer(New(Options{Sleep: func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
		return ctx.Err()
	}}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages",
		strings.NewReader(`{"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("x-api-key", "k")
	req.Header.Set(HeaderTurn, `{"text":"a b c","deltas":3,"event_delay":"10ms","stall":"5s","stall_at":3}`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(waits) < 4 {
		t.Fatalf("waits %v", waits)
	}
	for i, d := range waits {
		want := 10 * time.Millisecond
		if i == 2 { // before event 3: the first wait is before event 1
			want += 5 * time.Second
		}
		if d != want {
			t.Errorf("wait %d before event %d: %v, want %v (all: %v)", i, i+1, d, want, waits)
		}
	}
}
