package proxy_test

import (
	"net/http"
	"testing"
)

// A turn leaves through the one send path: on the canonical path with the
// agent's query, without the hop-by-hop headers of the agent's connection
// (nor those its Connection header names) or its claims about earlier
// hops, and its reply comes back without the provider's.
func TestTurnSendDropsHopHeaders(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, stream := range []bool{false, true} {
		e.mock.Reset()
		body := `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`
		if stream {
			body = `{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
		}
		h := append(hdr(), "Connection", "X-Secret-Hop", "X-Secret-Hop", "1", "Keep-Alive", "timeout=5",
			"X-Forwarded-For", "10.1.2.3", "Forwarded", "for=10.1.2.3", "Proxy-Authorization", "Basic eDp5", "X-Kept", "yes")
		resp := e.do(t, "POST", "/anthropic/v1/messages?beta=true", body, h...)
		if b := readAll(t, resp); resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %v: %d %s", stream, resp.StatusCode, b)
		}
		if resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("Transfer-Encoding") != "" {
			t.Errorf("stream %v: a hop-by-hop header of the provider's reached the agent: %v", stream, resp.Header)
		}
		reqs := e.mock.Requests()
		if len(reqs) != 1 {
			t.Fatalf("stream %v: provider saw %d requests, want 1", stream, len(reqs))
		}
		r := reqs[0]
		if r.Path != "/v1/messages" || r.RawQuery != "beta=true" {
			t.Errorf("stream %v: provider got %s ? %s", stream, r.Path, r.RawQuery)
		}
		for _, k := range []string{"X-Secret-Hop", "Keep-Alive", "X-Forwarded-For", "Forwarded", "Proxy-Authorization"} {
			if v := r.Header.Get(k); v != "" {
				t.Errorf("stream %v: %s: %q reached the provider", stream, k, v)
			}
		}
		if r.Header.Get("X-Kept") != "yes" || r.Header.Get("X-Api-Key") != antKey {
			t.Errorf("stream %v: the end-to-end header or the provider key is missing: %v", stream, r.Header)
		}
	}
}
