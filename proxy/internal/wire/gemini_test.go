package wire

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
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

// FuzzForwardQuery: whatever the query, what goes to the provider names no
// key parameter, however escaped, and keeps every other one as it came.
func FuzzForwardQuery(f *testing.F) {
	for _, s := range []string{"alt=sse&key=vk", "k%65y=vk", "key", "a=1&&b=2", "%zz=1&key=2", "KEY=1;key=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		out := ForwardQuery(raw)
		var want []string
		for part := range strings.SplitSeq(raw, "&") {
			name, _, _ := strings.Cut(part, "=")
			if n, err := url.QueryUnescape(name); (err == nil && n == "key") || name == "key" {
				continue
			}
			want = append(want, part)
		}
		if strings.Join(want, "&") != out && out != raw {
			t.Fatalf("ForwardQuery(%q) = %q", raw, out)
		}
		if q, err := url.ParseQuery(out); err == nil && q.Has("key") {
			t.Fatalf("ForwardQuery(%q) = %q still names a key", raw, out)
		}
	})
}
