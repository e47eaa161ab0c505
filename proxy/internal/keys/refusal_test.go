package keys

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestRefusal(t *testing.T) {
	reply := func(code int, kv ...string) *http.Response {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return &http.Response{StatusCode: code, Header: h}
	}
	tests := []struct {
		name    string
		resp    *http.Response
		err     error
		cool    time.Duration
		refused bool
	}{
		{"ok", reply(200), nil, 0, false},
		{"bad request", reply(400), nil, 0, false},
		{"server error", reply(500), nil, 0, false},
		{"429 with seconds", reply(429, "Retry-After", "20"), nil, 20 * time.Second, true},
		{"429 with fractional seconds", reply(429, "Retry-After", "1.5"), nil, 1500 * time.Millisecond, true},
		{"429 with milliseconds first", reply(429, "Retry-After-Ms", "250", "Retry-After", "1"), nil, 250 * time.Millisecond, true},
		{"429 without Retry-After", reply(429), nil, 0, true},
		{"429 with garbage", reply(429, "Retry-After", "soon"), nil, 0, true},
		{"429 with a negative delay", reply(429, "Retry-After", "-5"), nil, 0, true},
		{"429 for ever", reply(429, "Retry-After", "1e300"), nil, maxCool, true},
		{"429 with infinite milliseconds", reply(429, "Retry-After-Ms", "Inf"), nil, maxCool, true},
		{"429 with a date past", reply(429, "Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"), nil, 0, true},
		{"529 overloaded", reply(529, "Retry-After", "3"), nil, 3 * time.Second, true},
		{"503 does not cool", reply(503, "Retry-After", "3"), nil, -1, true},
		{"connection refused", nil, fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")}), -1, true},
		{"canceled", nil, context.Canceled, -1, false},
		{"reset after the request", nil, &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, -1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cool, refused := refusal(tc.resp, tc.err)
			if cool != tc.cool || refused != tc.refused {
				t.Errorf("refusal = %v, %v; want %v, %v", cool, refused, tc.cool, tc.refused)
			}
		})
	}
}

// TestRefusalRealDial: a dial to a port nobody listens on is a refusal.
func TestRefusalRealDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/messages", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Transport{DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext}).RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		t.Skip("something listens on the closed port")
	}
	if _, refused := refusal(nil, err); !refused {
		t.Errorf("dial error %v is not a refusal", err)
	}
}

// FuzzRetryAfter: the providers' Retry-After headers are outside bytes;
// whatever they hold, the cooling is a delay from zero to maxCool.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range [][2]string{{"20", ""}, {"1.5", ""}, {"", "250"}, {"Wed, 21 Oct 2015 07:28:00 GMT", ""},
		{"-1", "-1"}, {"NaN", "Inf"}, {"1e300", "1e300"}, {"", ""}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, after, afterMs string) {
		h := http.Header{}
		h.Set("Retry-After", after)
		h.Set("Retry-After-Ms", afterMs)
		if d := retryAfter(h); d < 0 || d > maxCool {
			t.Errorf("retryAfter(%q, %q) = %v", after, afterMs, d)
		}
	})
}
