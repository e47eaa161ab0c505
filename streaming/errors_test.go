package streaming_test

import (
	"encoding/json"
	"testing"

	"gatekeeper/streaming"
)

// TestErrorBody: each dialect's error body is JSON its own decoder reads
// back as the provider error it says, as the API's SDKs do.
func TestErrorBody(t *testing.T) {
	for api, d := range dialects {
		t.Run(string(api), func(t *testing.T) {
			body := d.ErrorBody("rate_limit_error", "slow \"down\"\n")
			if !json.Valid(body) {
				t.Fatalf("error body %q is not JSON", body)
			}
			res, err := d.DecodeJSON(body)
			if err != nil {
				t.Fatalf("DecodeJSON(%s): %v", body, err)
			}
			if len(res.Errors) != 1 || res.Errors[0].Type != "rate_limit_error" || res.Errors[0].Message != "slow \"down\"\n" {
				t.Fatalf("DecodeJSON(%s) errors = %+v", body, res.Errors)
			}
			if res.StopReason() != streaming.StopError {
				t.Fatalf("DecodeJSON(%s) stop %q, want %q", body, res.StopReason(), streaming.StopError)
			}
		})
	}
}
