package ratelimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// remainingHeaders maps the providers' "remaining" headers to the
// dimension they report.
var remainingHeaders = []struct {
	name string
	dim  func(r *Remaining) *int64
}{
	{"Anthropic-Ratelimit-Requests-Remaining", func(r *Remaining) *int64 { return &r.Requests }},
	{"Anthropic-Ratelimit-Input-Tokens-Remaining", func(r *Remaining) *int64 { return &r.Input }},
	{"Anthropic-Ratelimit-Output-Tokens-Remaining", func(r *Remaining) *int64 { return &r.Output }},
	{"Anthropic-Ratelimit-Tokens-Remaining", func(r *Remaining) *int64 { return &r.Tokens }},
	{"X-Ratelimit-Remaining-Requests", func(r *Remaining) *int64 { return &r.Requests }},
	{"X-Ratelimit-Remaining-Tokens", func(r *Remaining) *int64 { return &r.Tokens }},
}

// resetHeaders maps the providers' "reset" headers to the dimension they
// report: Anthropic's are RFC 3339 times, OpenAI's durations ("1s",
// "6m0s", "20ms"). Anthropic's anthropic-ratelimit-tokens-reset is not
// read: it is the reset of whichever token limit is tightest, which would
// lower the other one for nothing, and the input and output resets say
// each precisely.
var resetHeaders = []struct {
	name     string
	absolute bool // an RFC 3339 time, else a duration
	dim      func(r *Remaining) *time.Duration
}{
	{"Anthropic-Ratelimit-Requests-Reset", true, func(r *Remaining) *time.Duration { return &r.RequestsReset }},
	{"Anthropic-Ratelimit-Input-Tokens-Reset", true, func(r *Remaining) *time.Duration { return &r.InputReset }},
	{"Anthropic-Ratelimit-Output-Tokens-Reset", true, func(r *Remaining) *time.Duration { return &r.OutputReset }},
	{"X-Ratelimit-Reset-Requests", false, func(r *Remaining) *time.Duration { return &r.RequestsReset }},
	{"X-Ratelimit-Reset-Tokens", false, func(r *Remaining) *time.Duration { return &r.TokensReset }},
}

// ParseHeaders reads the anthropic-ratelimit-* and x-ratelimit-* remaining
// and reset headers of an upstream reply received at now; ok is false when
// none holds a value. A header that is not a non-negative integer (a
// count), an RFC 3339 time or a non-negative duration (a reset) is taken
// as not reported: a provider's odd header must never make gatekeeper
// think more is left, and Settle only ever lowers. Where two headers
// report one dimension, the one that lowers more wins.
//
// A reset time is read as the earliest moment it may stand for: a time in
// whole seconds (what Anthropic sends) may have been rounded up by up to
// a second, so a second less; a time already past is a reset of 0.
func ParseHeaders(h http.Header, now time.Time) (r Remaining, ok bool) {
	r = Unreported()
	for _, rh := range remainingHeaders {
		v := get(h, rh.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 0 {
			continue
		}
		p := rh.dim(&r)
		if *p < 0 || n < *p {
			*p = n
		}
		ok = true
	}
	for _, rh := range resetHeaders {
		v := strings.TrimSpace(get(h, rh.name))
		if v == "" {
			continue
		}
		d, good := parseReset(v, rh.absolute, now)
		if !good {
			continue
		}
		if p := rh.dim(&r); d > *p {
			*p = d
		}
		ok = true
	}
	return r, ok
}

// get is h.Get of a canonical name, without canonicalizing it again (the
// names above are canonical; every reply is read for all of them).
func get(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// parseReset reads one reset header as the time until the provider's
// bucket is full again.
func parseReset(v string, absolute bool, now time.Time) (time.Duration, bool) {
	if !absolute {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return 0, false
		}
		return d, true
	}
	at, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, false
	}
	if !strings.Contains(v, ".") {
		at = at.Add(-time.Second)
	}
	return max(at.Sub(now), 0), true
}
