package dialect

import (
	"net/http"
	"testing"

	"gatekeeper/streaming"
)

// TestTable: each API is listed once, routed by its family and path on
// POST alone, and a family answers in its first entry's format.
func TestTable(t *testing.T) {
	seen := map[streaming.API]bool{}
	for _, d := range table {
		if seen[d.API] {
			t.Errorf("%s listed twice", d.API)
		}
		seen[d.API] = true
		if Of(d.API) != d || Stream(d.API) != d.Stream {
			t.Errorf("Of(%s) is not its entry", d.API)
		}
		for _, stream := range []bool{false, true} {
			path, _ := d.Rest("some-model", stream)
			if got := Turn(d.Provider, http.MethodPost, path); got != d {
				t.Errorf("Turn(%s, POST, %s) = %v", d.Provider, path, got)
			}
			if got := Turn(d.Provider, http.MethodGet, path); got != nil {
				t.Errorf("Turn(%s, GET, %s) = %v, want nil", d.Provider, path, got)
			}
		}
	}
	tests := []struct {
		name, provider string
		want           streaming.API
	}{
		{"anthropic", "anthropic", streaming.APIAnthropic},
		{"openai answers as chat", "openai", streaming.APIChat},
		{"gemini", "gemini", streaming.APIGemini},
		{"unknown", "bedrock", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Family(tc.provider)
			switch {
			case tc.want == "" && d != nil:
				t.Errorf("Family(%q) = %s, want nil", tc.provider, d.API)
			case tc.want != "" && (d == nil || d.API != tc.want):
				t.Errorf("Family(%q) = %v, want %s", tc.provider, d, tc.want)
			}
		})
	}
	if Unclaimed() != table[0] {
		t.Error("a request no provider claims is not answered in the first entry's format")
	}
	defer func() {
		if recover() == nil {
			t.Error("Of of an unknown API did not panic")
		}
	}()
	Of("bedrock")
}

// TestGeminiRoutes: a Gemini turn is routed by its model's path; its
// other routes are no turn.
func TestGeminiRoutes(t *testing.T) {
	for path, want := range map[string]bool{
		"/v1beta/models/gemini-2.5-pro:streamGenerateContent": true,
		"/v1beta/models/gemini-2.5-pro:generateContent":       true,
		"/v1beta/models/gemini-2.5-pro:countTokens":           false,
		"/v1beta/models": false,
		"/v1/messages":   false,
	} {
		if got := Turn("gemini", http.MethodPost, path) != nil; got != want {
			t.Errorf("Turn(gemini, POST, %s) = %v, want %v", path, got, want)
		}
	}
}
