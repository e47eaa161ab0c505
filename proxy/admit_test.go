package proxy

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"gatekeeper/proxy/internal/admit"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/escrow"
	"gatekeeper/proxy/internal/keys"
	"gatekeeper/trajectory"
)

// TestAdmitted pins the one mapping of refusals to what the agent gets
// (agentError): each kind of admission's, the key scheduler's and the
// escrow's refusals its status, error type and retry advice.
func TestAdmitted(t *testing.T) {
	plain := errors.New("not a refusal")
	already := &apierr.Error{Code: http.StatusForbidden, Type: apierr.TrajectoryCanceled, Msg: "ended"}
	tests := []struct {
		name       string
		err        error
		code       int
		typ        string
		noRetry    bool
		retryAfter time.Duration
	}{
		{"exhausted", &admit.Refusal{Kind: admit.Exhausted, Msg: "m"}, http.StatusPaymentRequired, apierr.BudgetExceeded, true, 0},
		{"contended", &admit.Refusal{Kind: admit.Contended, Msg: "m", RetryAfter: 5 * time.Second}, http.StatusTooManyRequests, apierr.RateLimited, false, 5 * time.Second},
		{"operators only", &admit.Refusal{Kind: admit.OperatorsOnly, Msg: "m"}, http.StatusForbidden, apierr.Permission, true, 0},
		{"store out", &admit.Refusal{Kind: admit.Unavailable, Err: trajectory.ErrUnavailable}, http.StatusServiceUnavailable, "api_error", false, 5 * time.Second},
		{"an apierr.Error stays", already, http.StatusForbidden, apierr.TrajectoryCanceled, false, 0},
		{"run ended", &admit.Refusal{Kind: admit.RunEnded, Msg: "m"}, http.StatusForbidden, apierr.TrajectoryCanceled, true, 0},
		{"paused", &admit.Refusal{Kind: admit.Paused, Msg: "m", RetryAfter: 30 * time.Second}, http.StatusServiceUnavailable, apierr.TrajectoryPaused, false, 30 * time.Second},
		{"a store failure that is an apierr.Error", &admit.Refusal{Kind: admit.Unavailable, Err: already}, http.StatusForbidden, apierr.TrajectoryCanceled, false, 0},
		{"key capacity", &keys.Refusal{Status: http.StatusTooManyRequests, Msg: "m", RetryAfter: 2 * time.Second}, http.StatusTooManyRequests, apierr.RateLimited, false, 2 * time.Second},
		{"no key", &keys.Refusal{Status: http.StatusServiceUnavailable, Msg: "m", RetryAfter: time.Second}, http.StatusServiceUnavailable, apierr.Upstream, false, time.Second},
		{"the escrow's answer", &escrow.Answer{Status: http.StatusConflict, Type: apierr.InvalidRequest, Msg: "m", NoRetry: true}, http.StatusConflict, apierr.InvalidRequest, true, 0},
		{"a store error", storeErr(trajectory.ErrUnavailable), http.StatusServiceUnavailable, apierr.Internal, false, 5 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var he *apierr.Error
			if !errors.As(agentError(tc.err), &he) {
				t.Fatalf("agentError(%v) is no apierr.Error", tc.err)
			}
			if he.Code != tc.code || he.Type != tc.typ || he.NoRetry != tc.noRetry || he.RetryAfter != tc.retryAfter {
				t.Errorf("admitted = %d %s noRetry %v retry after %s; want %d %s %v %s", he.Code, he.Type, he.NoRetry, he.RetryAfter,
					tc.code, tc.typ, tc.noRetry, tc.retryAfter)
			}
		})
	}
	if agentError(plain) != plain || agentError(nil) != nil {
		t.Error("admitted changed an error that is no refusal")
	}
	if err := agentError(&admit.Refusal{Kind: admit.Unavailable, Err: trajectory.ErrUnavailable}); !errors.Is(err, trajectory.ErrUnavailable) {
		t.Errorf("a store failure's cause is lost: %v", err)
	}
}
