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
		if got := Turn(d.Provider, http.MethodPost, d.Path); got != d {
			t.Errorf("Turn(%s, POST, %s) = %v", d.Provider, d.Path, got)
		}
		if got := Turn(d.Provider, http.MethodGet, d.Path); got != nil {
			t.Errorf("Turn(%s, GET, %s) = %v, want nil", d.Provider, d.Path, got)
		}
	}
	tests := []struct {
		name, provider string
		want           streaming.API
	}{
		{"anthropic", "anthropic", streaming.APIAnthropic},
		{"openai answers as chat", "openai", streaming.APIChat},
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
