package apierr

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"gatekeeper/streaming"
)

// TestWrite: each kind of error gets its status, its headers and a body
// in the request's API's error format.
func TestWrite(t *testing.T) {
	tests := []struct {
		name    string
		api     streaming.API
		err     error
		code    int
		headers map[string]string // "" asserts the header is absent
		body    string            // a fragment of the body; "" for none
	}{
		{"refusal", streaming.APIAnthropic, New(http.StatusNotFound, NotFound, "no such thing"), 404,
			map[string]string{"Content-Type": "application/json", "Retry-After": "", "X-Should-Retry": "", "Connection": ""},
			`"type":"not_found_error"`},
		{"wrapped, retry after a second and a half", streaming.APIChat,
			fmt.Errorf("admit: %w", &Error{Code: 429, Type: RateLimited, Msg: "busy", RetryAfter: 1500 * time.Millisecond}), 429,
			map[string]string{"Retry-After": "2"}, `"type":"rate_limited"`},
		{"final", streaming.APIResponses, &Error{Code: 402, Type: BudgetExceeded, Msg: "spent", NoRetry: true}, 402,
			map[string]string{"X-Should-Retry": "false"}, `"message":"spent"`},
		{"closing", streaming.APIAnthropic, Closing(BadRequest("bad path")), 400,
			map[string]string{"Connection": "close"}, `"type":"invalid_request_error"`},
		{"any other error", streaming.APIAnthropic, errors.New("store: down"), 500,
			nil, "see its logs"},
		{"client gone", streaming.APIAnthropic, fmt.Errorf("relay: %w", ErrClientGone), 499,
			map[string]string{"Content-Type": ""}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			Write(rec, tc.api, tc.err)
			if rec.Code != tc.code {
				t.Errorf("status %d, want %d", rec.Code, tc.code)
			}
			for k, v := range tc.headers {
				if got := rec.Header().Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
			if body := rec.Body.String(); tc.body == "" && body != "" || !strings.Contains(body, tc.body) {
				t.Errorf("body %s, want %q in it", body, tc.body)
			}
			if strings.Contains(rec.Body.String(), "store: down") {
				t.Error("a detail for the logs reached the agent")
			}
		})
	}
}

// TestWriteAbort: an aborted reply aborts the connection.
func TestWriteAbort(t *testing.T) {
	defer func() {
		if r := recover(); r != http.ErrAbortHandler {
			t.Fatalf("recovered %v, want http.ErrAbortHandler", r)
		}
	}()
	Write(httptest.NewRecorder(), streaming.APIAnthropic, fmt.Errorf("relay: %w", http.ErrAbortHandler))
}
