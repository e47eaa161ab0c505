package ratelimit

import (
	"net/http"
	"strconv"
	"strings"
)

// remainingHeaders maps the providers' "remaining" headers to the
// dimension they report. Anthropic's reset headers (RFC 3339 times) and
// OpenAI's (durations) are not read: the buckets refill continuously at the
// configured rate, as Anthropic documents its own buckets doing, so only
// the level matters.
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

// ParseHeaders reads the anthropic-ratelimit-*-remaining and
// x-ratelimit-remaining-* headers of an upstream reply; ok is false when
// none holds a count. A header that is not a non-negative integer is taken
// as not reported: a provider's odd header must never make gatekeeper
// think more is left, and Settle only ever lowers.
func ParseHeaders(h http.Header) (r Remaining, ok bool) {
	r = Unreported()
	for _, rh := range remainingHeaders {
		v := h.Get(rh.name)
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
	return r, ok
}
