package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"gatekeeper/proxy/internal/dialect"
	"gatekeeper/streaming"
)

// Error types agents receive, in their provider's error format (README.md).
const (
	errAuthentication     = "authentication_error"
	errPermission         = "permission_error"
	errInvalidRequest     = "invalid_request_error"
	errTrajectoryCanceled = "trajectory_canceled"
	errTrajectoryPaused   = "trajectory_paused"
	errUpstream           = "upstream_error"
	errNotFound           = "not_found_error"
	errBudgetExceeded     = "budget_exceeded"
	errRateLimited        = "rate_limited"
)

// HTTPError is an error with the status and message an agent should see.
// Msg is for the client; Err is the detail kept for logs.
type HTTPError struct {
	Code       int
	Type       string
	Msg        string
	RetryAfter time.Duration // set for waits the client should retry
	// NoRetry marks a final refusal: the official SDKs honour
	// x-should-retry: false over their status rules.
	NoRetry bool
	Err     error
}

func (e *HTTPError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.Code, e.Type, e.Msg, e.Err)
	}
	return fmt.Sprintf("%d %s: %s", e.Code, e.Type, e.Msg)
}

func (e *HTTPError) Unwrap() error { return e.Err }

// errClientGone: the agent went away before its answer; nobody is left
// to read one, and the log records a 499.
var errClientGone = errors.New("proxy: client went away")

// closing marks a refusal after which the connection is closed: the
// server would otherwise wait for the rest of the request's body, however
// slowly it comes, before reading the next request.
type closing struct{ error }

func (c closing) Unwrap() error { return c.error }

func httpErr(code int, typ, msg string) *HTTPError {
	return &HTTPError{Code: code, Type: typ, Msg: msg}
}

// writeError is the one writer of errors: it answers with err in the
// error format of api. Errors that are not HTTPErrors become a 500 whose
// detail stays in the logs; errClientGone is a bare 499, and
// http.ErrAbortHandler aborts the connection (the reply had begun, or the
// run was killed).
func writeError(w http.ResponseWriter, api streaming.API, err error) {
	switch {
	case errors.Is(err, http.ErrAbortHandler):
		panic(http.ErrAbortHandler)
	case errors.Is(err, errClientGone):
		w.WriteHeader(499)
		return
	}
	if errors.As(err, new(closing)) {
		w.Header().Set("Connection", "close")
	}
	var he *HTTPError
	if !errors.As(err, &he) {
		he = &HTTPError{Code: http.StatusInternalServerError, Type: "api_error", Msg: "gatekeeper failed to handle the request; see its logs", Err: err}
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	if he.RetryAfter > 0 {
		secs := int((he.RetryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.Itoa(secs))
	}
	if he.NoRetry {
		h.Set("X-Should-Retry", "false")
	}
	w.WriteHeader(he.Code)
	_, _ = w.Write(errorBody(api, he.Type, he.Msg))
}

// errorBody renders an error in api's own format (its dialect's).
func errorBody(api streaming.API, typ, msg string) []byte {
	return dialect.Stream(api).ErrorBody(typ, msg)
}
