package wire

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"gatekeeper/config"
	"gatekeeper/streaming"
)

// TestGeminiKeys: a Gemini agent's virtual key comes in x-goog-api-key or
// the query's key; neither goes on to the provider, which gets the pool's
// key in x-goog-api-key.
func TestGeminiKeys(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/gemini/v1beta/models/m:generateContent", nil)
	r.Header.Set("X-Goog-Api-Key", "vk-header")
	if got := PresentedKey(r); got != "vk-header" {
		t.Errorf("PresentedKey = %q", got)
	}
	r = httptest.NewRequest(http.MethodPost, "/gemini/v1beta/models/m:streamGenerateContent?alt=sse&key=vk-query", nil)
	if got := PresentedKey(r); got != "vk-query" {
		t.Errorf("PresentedKey = %q", got)
	}
	for raw, want := range map[string]string{
		"alt=sse&key=vk":    "alt=sse",
		"key=vk&alt=sse":    "alt=sse",
		"k%65y=vk&alt=sse":  "alt=sse",
		"key=a&key=b":       "",
		"alt=sse":           "alt=sse",
		"monkey=1&alt=sse":  "monkey=1&alt=sse",
		"alt=sse&keyword=x": "alt=sse&keyword=x",
		"":                  "",
	} {
		if got := ForwardQuery(raw); got != want {
			t.Errorf("ForwardQuery(%q) = %q, want %q", raw, got, want)
		}
	}
	h := http.Header{"X-Goog-Api-Key": {"vk"}}
	StripAgentHeaders(h)
	SetProviderKey(h, config.APIGemini, "pool-key", nil)
	if h.Get("X-Goog-Api-Key") != "pool-key" || h.Get("Authorization") != "" {
		t.Errorf("headers %v", h)
	}
}

// TestGeminiOutputLimit: the nested output limit must be an integer, in
// a config named one way.
func TestGeminiOutputLimit(t *testing.T) {
	for body, ok := range map[string]bool{
		`{"contents":[],"generationConfig":{"maxOutputTokens":100}}`:                   true,
		`{"contents":[],"generation_config":{"max_output_tokens":100}}`:                true,
		`{"contents":[],"generationConfig":{"maxOutputTokens":"100"}}`:                 false,
		`{"contents":[],"generationConfig":{"max_output_tokens":1.5}}`:                 false,
		`{"contents":[],"generationConfig":{"topK":3},"generation_config":{"topK":4}}`: false,
		`{"contents":[],"generationConfig":null}`:                                      true,
	} {
		err := CheckTurnBody(streaming.APIGemini, []byte(body), false)
		if (err == nil) != ok {
			t.Errorf("%s: %v", body, err)
		}
	}
}
