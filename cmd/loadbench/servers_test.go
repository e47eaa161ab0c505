package main

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"gatekeeper/mockprovider"
)

// TestRoomyLimits: behind roomyLimits the mock reports all of the key's
// limits left, whatever it has served, and its streams still reach the
// client event by event (the wrapper lets ResponseController flush).
func TestRoomyLimits(t *testing.T) {
	mock := mockprovider.New(mockprovider.Options{Keys: []string{upstreamKey}, RequestsPerMinute: 10, TokensPerMinute: 1000})
	srv := httptest.NewServer(roomyLimits(mock))
	defer srv.Close()
	for i := range 12 { // past the advertised 10 requests a minute
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(string(messagesBody(i%2 == 1, "hello"))))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Api-Key", upstreamKey)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(mockprovider.HeaderTurn, `{"kind":"text","text":"tok tok tok ","deltas":3}`)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		h := resp.Header
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		if got := h.Get("Anthropic-Ratelimit-Requests-Remaining"); got != "10" || h.Get("Anthropic-Ratelimit-Requests-Limit") != "10" {
			t.Errorf("request %d: requests remaining %q of %q, want all 10", i, got, h.Get("Anthropic-Ratelimit-Requests-Limit"))
		}
		if got := h.Get("Anthropic-Ratelimit-Tokens-Remaining"); got != "1000" {
			t.Errorf("request %d: tokens remaining %q, want 1000", i, got)
		}
		if i%2 == 1 {
			br := bufio.NewReader(resp.Body)
			n := 0
			for range 100 {
				if _, err := readEvent(br); err != nil {
					break
				}
				n++
			}
			if n < 3 {
				t.Errorf("request %d: %d events in the stream", i, n)
			}
		}
		resp.Body.Close()
	}
}
