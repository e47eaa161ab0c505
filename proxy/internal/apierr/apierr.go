package apierr

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"gatekeeper/proxy/internal/dialect"
	"gatekeeper/streaming"
)

// Error types agents receive, in their provider's error format (docs/operations/troubleshooting.md).
const (
	Authentication     = "authentication_error"
	Permission         = "permission_error"
	InvalidRequest     = "invalid_request_error"
	TrajectoryCanceled = "trajectory_canceled"
	TrajectoryPaused   = "trajectory_paused"
	Upstream           = "upstream_error"
	NotFound           = "not_found_error"
	BudgetExceeded     = "budget_exceeded"
	RateLimited        = "rate_limited"
	// ApprovalRefused: a gated call was refused where no reply can carry
	// the refusal (docs/guide/approvals.md, "How a held call behaves").
	ApprovalRefused = "approval_refused"
	// Internal: gatekeeper could not handle the request (its store is out,
	// or an error without an agent's form).
	Internal = "api_error"
)

// Error is an error with the status and message an agent should see.
// Msg is for the client; Err is the detail kept for logs.
type Error struct {
	Code       int
	Type       string
	Msg        string
	RetryAfter time.Duration // set for waits the client should retry
	// NoRetry marks a final refusal: the official SDKs honour
	// x-should-retry: false over their status rules.
	NoRetry bool
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.Code, e.Type, e.Msg, e.Err)
	}
	return fmt.Sprintf("%d %s: %s", e.Code, e.Type, e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

// New is the error of status code, type typ and message msg.
func New(code int, typ, msg string) *Error {
	return &Error{Code: code, Type: typ, Msg: msg}
}

// BadRequest is the invalid_request_error (400) of message msg.
func BadRequest(msg string) *Error { return New(http.StatusBadRequest, InvalidRequest, msg) }

// ErrClientGone: the agent went away before its answer; nobody is left
// to read one, and the log records a 499.
var ErrClientGone = errors.New("proxy: client went away")

// closing marks a refusal after which the connection is closed.
type closing struct{ error }

func (c closing) Unwrap() error { return c.error }

// Closing marks err as a refusal after which the connection is closed:
// the server would otherwise wait for the rest of the request's body,
// however slowly it comes, before reading the next request.
func Closing(err error) error { return closing{err} }

// Write is the one writer of errors: it answers with err in the error
// format of api. Errors that are not *Errors become a 500 whose detail
// stays in the logs; ErrClientGone is a bare 499, and
// http.ErrAbortHandler aborts the connection (the reply had begun, or the
// run was killed).
func Write(w http.ResponseWriter, api streaming.API, err error) {
	switch {
	case errors.Is(err, http.ErrAbortHandler):
		panic(http.ErrAbortHandler)
	case errors.Is(err, ErrClientGone):
		w.WriteHeader(499)
		return
	}
	if errors.As(err, new(closing)) {
		w.Header().Set("Connection", "close")
	}
	var he *Error
	if !errors.As(err, &he) {
		he = &Error{Code: http.StatusInternalServerError, Type: Internal, Msg: "gatekeeper failed to handle the request; see its logs", Err: err}
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
	_, _ = w.Write(withCode(Body(api, he.Type, he.Msg), he.Code))
}

// withCode sets a numeric error.code of body (Gemini's google.rpc.Status
// carries the HTTP status there) to the status the error is answered
// with: a dialect's body knows the type, not the status of each answer.
func withCode(body []byte, code int) []byte {
	if gjson.GetBytes(body, "error.code").Type != gjson.Number {
		return body
	}
	if out, err := sjson.SetBytes(body, "error.code", code); err == nil {
		return out
	}
	return body
}

// Body renders an error in api's own format (its dialect's).
func Body(api streaming.API, typ, msg string) []byte {
	return dialect.Stream(api).ErrorBody(typ, msg)
}
