package passthrough

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"
)

// ErrClientGone: the agent went away before its answer; nobody is left
// to read one.
var ErrClientGone = errors.New("passthrough: client went away")

// Error is an answer for the agent: its status, its Retry-After, its
// message; Err is the detail kept for the logs.
type Error struct {
	Status     int
	RetryAfter time.Duration
	Msg        string
	Err        error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// UpstreamRetryAfter is what a 502 or 504 for a provider gatekeeper could
// not reach asks the agent to wait.
const UpstreamRetryAfter = 5 * time.Second

// Unreachable is the answer when provider could not be reached, or its
// reply read, before any byte went to the agent: ErrClientGone when the
// agent went away, else a 502 (a 504 for a timeout) that asks for a
// retry, logged to log.
func Unreachable(ctx context.Context, log *slog.Logger, provider string, err error) error {
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		// The agent went away; nobody is left to answer.
		return ErrClientGone
	}
	log.LogAttrs(ctx, slog.LevelWarn, "upstream unreachable",
		slog.String("provider", provider), slog.String("error", err.Error()))
	code := http.StatusBadGateway
	if errors.Is(err, context.DeadlineExceeded) {
		code = http.StatusGatewayTimeout
	}
	return &Error{Status: code, RetryAfter: UpstreamRetryAfter,
		Msg: "gatekeeper could not get a reply from provider " + provider + "; retry later", Err: err}
}
