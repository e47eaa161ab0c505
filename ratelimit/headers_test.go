package ratelimit

import (
	"net/http"
	"testing"
)

func TestParseHeaders(t *testing.T) {
	none := Remaining{Requests: -1, Input: -1, Output: -1, Tokens: -1}
	tests := []struct {
		name string
		h    map[string]string
		want Remaining
		ok   bool
	}{
		{"none", nil, none, false},
		{"unrelated", map[string]string{"Retry-After": "3", "anthropic-ratelimit-requests-limit": "50"}, none, false},
		{
			"anthropic",
			map[string]string{
				"anthropic-ratelimit-requests-remaining":      "49",
				"anthropic-ratelimit-input-tokens-remaining":  "39000",
				"anthropic-ratelimit-output-tokens-remaining": "7800",
				"anthropic-ratelimit-tokens-remaining":        "46000",
				"anthropic-ratelimit-requests-reset":          "2026-12-03T10:00:30Z",
			},
			Remaining{Requests: 49, Input: 39000, Output: 7800, Tokens: 46000}, true,
		},
		{
			"openai",
			map[string]string{
				"x-ratelimit-remaining-requests": "59",
				"x-ratelimit-remaining-tokens":   "149984",
				"x-ratelimit-reset-requests":     "1s",
				"x-ratelimit-reset-tokens":       "6m0s",
			},
			Remaining{Requests: 59, Input: -1, Output: -1, Tokens: 149984}, true,
		},
		{
			"both: the lower count wins",
			map[string]string{"anthropic-ratelimit-requests-remaining": "10", "x-ratelimit-remaining-requests": "7"},
			Remaining{Requests: 7, Input: -1, Output: -1, Tokens: -1}, true,
		},
		{"spaces", map[string]string{"x-ratelimit-remaining-requests": " 5 "}, Remaining{Requests: 5, Input: -1, Output: -1, Tokens: -1}, true},
		{"negative", map[string]string{"x-ratelimit-remaining-requests": "-5"}, none, false},
		{"not a number", map[string]string{"x-ratelimit-remaining-tokens": "lots"}, none, false},
		{"fraction", map[string]string{"x-ratelimit-remaining-tokens": "1.5"}, none, false},
		{"overflow", map[string]string{"x-ratelimit-remaining-tokens": "99999999999999999999"}, none, false},
		{
			"one bad, one good",
			map[string]string{"x-ratelimit-remaining-tokens": "x", "x-ratelimit-remaining-requests": "0"},
			Remaining{Requests: 0, Input: -1, Output: -1, Tokens: -1}, true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.h {
				h.Set(k, v)
			}
			got, ok := ParseHeaders(h)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("ParseHeaders = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// FuzzParseHeaders feeds arbitrary values to every header ParseHeaders
// reads: it must never panic, never report a negative count, and report
// ok exactly when it reports some count.
func FuzzParseHeaders(f *testing.F) {
	for _, seed := range []struct{ a, b string }{
		{"49", "46000"}, {"0", "0"}, {"", ""}, {"-1", "1"}, {" 7", "1e3"},
		{"9223372036854775807", "9223372036854775808"}, {"0x10", "+5"}, {"5\x00", "٣"},
	} {
		f.Add(seed.a, seed.b)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		h := http.Header{}
		for i, rh := range remainingHeaders {
			if i%2 == 0 {
				h[rh.name] = []string{a}
			} else {
				h[rh.name] = []string{b}
			}
		}
		r, ok := ParseHeaders(h)
		some := false
		for _, v := range []int64{r.Requests, r.Input, r.Output, r.Tokens} {
			if v < -1 {
				t.Fatalf("ParseHeaders(%q, %q) = %+v: a count below -1", a, b, r)
			}
			some = some || v >= 0
		}
		if ok != some {
			t.Fatalf("ParseHeaders(%q, %q) = %+v, ok %v", a, b, r, ok)
		}
	})
}
