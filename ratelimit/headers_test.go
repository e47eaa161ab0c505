package ratelimit

import (
	"net/http"
	"testing"
	"time"
)

// headersNow is the time the replies of the header tests are received.
var headersNow = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

// counts is a Remaining reporting the given counts and no reset.
func counts(req, in, out, tok int64) Remaining {
	r := Unreported()
	r.Requests, r.Input, r.Output, r.Tokens = req, in, out, tok
	return r
}

// withResets is r reporting the given resets too.
func withResets(r Remaining, req, in, out, tok time.Duration) Remaining {
	r.RequestsReset, r.InputReset, r.OutputReset, r.TokensReset = req, in, out, tok
	return r
}

func TestParseHeaders(t *testing.T) {
	none := Unreported()
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
				"anthropic-ratelimit-input-tokens-reset":      "2026-12-03T10:00:01Z",
				"anthropic-ratelimit-output-tokens-reset":     "2026-12-03T10:00:02.5Z",
				"anthropic-ratelimit-tokens-reset":            "2026-12-03T10:00:59Z",
			},
			// Whole seconds may be rounded up: a second less. The
			// combined tokens reset is not read.
			withResets(counts(49, 39000, 7800, 46000), 29*time.Second, 0, 2500*time.Millisecond, -1), true,
		},
		{
			"anthropic reset past",
			map[string]string{"anthropic-ratelimit-requests-reset": "2026-12-03T09:59:00Z"},
			withResets(none, 0, -1, -1, -1), true,
		},
		{
			"anthropic reset with an offset",
			map[string]string{"anthropic-ratelimit-requests-reset": "2026-12-03T11:00:04.25+01:00"},
			withResets(none, 4250*time.Millisecond, -1, -1, -1), true,
		},
		{
			"openai",
			map[string]string{
				"x-ratelimit-remaining-requests": "59",
				"x-ratelimit-remaining-tokens":   "149984",
				"x-ratelimit-reset-requests":     "1s",
				"x-ratelimit-reset-tokens":       "6m0s",
			},
			withResets(counts(59, -1, -1, 149984), time.Second, -1, -1, 6*time.Minute), true,
		},
		{"openai milliseconds", map[string]string{"x-ratelimit-reset-tokens": "20ms"}, withResets(none, -1, -1, -1, 20*time.Millisecond), true},
		{"openai fraction", map[string]string{"x-ratelimit-reset-requests": "7.66s"}, withResets(none, 7660*time.Millisecond, -1, -1, -1), true},
		{
			"both: the lower count and the longer reset win",
			map[string]string{
				"anthropic-ratelimit-requests-remaining": "10", "x-ratelimit-remaining-requests": "7",
				"anthropic-ratelimit-requests-reset": "2026-12-03T10:00:03Z", "x-ratelimit-reset-requests": "500ms",
			},
			withResets(counts(7, -1, -1, -1), 2*time.Second, -1, -1, -1), true,
		},
		{"spaces", map[string]string{"x-ratelimit-remaining-requests": " 5 ", "x-ratelimit-reset-requests": " 1s "}, withResets(counts(5, -1, -1, -1), time.Second, -1, -1, -1), true},
		{"negative", map[string]string{"x-ratelimit-remaining-requests": "-5"}, none, false},
		{"negative reset", map[string]string{"x-ratelimit-reset-requests": "-1s"}, none, false},
		{"reset without a unit", map[string]string{"x-ratelimit-reset-requests": "5"}, none, false},
		{"reset not a time", map[string]string{"anthropic-ratelimit-requests-reset": "soon"}, none, false},
		{"reset a date only", map[string]string{"anthropic-ratelimit-requests-reset": "2026-12-03"}, none, false},
		{"not a number", map[string]string{"x-ratelimit-remaining-tokens": "lots"}, none, false},
		{"fraction", map[string]string{"x-ratelimit-remaining-tokens": "1.5"}, none, false},
		{"overflow", map[string]string{"x-ratelimit-remaining-tokens": "99999999999999999999"}, none, false},
		{
			"one bad, one good",
			map[string]string{"x-ratelimit-remaining-tokens": "x", "x-ratelimit-remaining-requests": "0"},
			counts(0, -1, -1, -1), true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.h {
				h.Set(k, v)
			}
			got, ok := ParseHeaders(h, headersNow)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("ParseHeaders = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// FuzzParseHeaders feeds arbitrary values to every header ParseHeaders
// reads: it must never panic, never report a negative count or reset, and
// report ok exactly when it reports something.
func FuzzParseHeaders(f *testing.F) {
	for _, seed := range []struct{ a, b string }{
		{"49", "46000"}, {"0", "0"}, {"", ""}, {"-1", "1"}, {" 7", "1e3"},
		{"9223372036854775807", "9223372036854775808"}, {"0x10", "+5"}, {"5\x00", "٣"},
		{"2026-12-03T10:00:30Z", "6m0s"}, {"1s", "20ms"}, {"2026-12-03T10:00:01.5+01:00", "-1s"},
		{"9999999999h", "0001-01-01T00:00:00Z"}, {"1.5s", "9999-12-31T23:59:59.999999999Z"},
	} {
		f.Add(seed.a, seed.b)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		h := http.Header{}
		for i, rh := range remainingHeaders {
			h[rh.name] = []string{[]string{a, b}[i%2]}
		}
		for i, rh := range resetHeaders {
			h[rh.name] = []string{[]string{b, a}[i%2]}
		}
		r, ok := ParseHeaders(h, headersNow)
		some := false
		for _, v := range []int64{r.Requests, r.Input, r.Output, r.Tokens} {
			if v < -1 {
				t.Fatalf("ParseHeaders(%q, %q) = %+v: a count below -1", a, b, r)
			}
			some = some || v >= 0
		}
		for _, v := range []time.Duration{r.RequestsReset, r.InputReset, r.OutputReset, r.TokensReset} {
			if v < -1 {
				t.Fatalf("ParseHeaders(%q, %q) = %+v: a reset below -1", a, b, r)
			}
			some = some || v >= 0
		}
		if ok != some {
			t.Fatalf("ParseHeaders(%q, %q) = %+v, ok %v", a, b, r, ok)
		}
		// What the buckets make of it stays within bounds.
		for _, d := range resets(r) {
			if d < -1 || d > maxReset {
				t.Fatalf("resets(%+v) = %s, outside [-1ns, %s]", r, d, maxReset)
			}
		}
	})
}

// TestHeaderNamesCanonical checks that the names ParseHeaders reads
// without canonicalizing them (get) are canonical.
func TestHeaderNamesCanonical(t *testing.T) {
	var names []string
	for _, rh := range remainingHeaders {
		names = append(names, rh.name)
	}
	for _, rh := range resetHeaders {
		names = append(names, rh.name)
	}
	for _, n := range names {
		if c := http.CanonicalHeaderKey(n); c != n {
			t.Errorf("header name %q is not canonical (%q)", n, c)
		}
	}
}
