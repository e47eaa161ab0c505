package redis

import (
	"context"
	"errors"
	"net"

	goredis "github.com/redis/go-redis/v9"
)

// CountFailures makes c call failed once for every command, or pipeline,
// that did not get Redis's answer: it could not connect, the connection
// broke or timed out, the caller's deadline passed first, or Redis replied
// that it cannot serve it now (see notNow). An absent key, an error reply
// that is an answer (NOSCRIPT before a script is loaded, a transaction
// whose watched keys changed) and a caller that went away are not
// failures. Every user of c (the record and approvals stores, the tenant
// ledgers, the rate-limit buckets, the event stream) is counted, at the
// cost of one function call per command.
func CountFailures(c goredis.UniversalClient, failed func()) {
	c.AddHook(failureHook{failed: failed})
}

type failureHook struct{ failed func() }

var _ goredis.Hook = failureHook{}

func (h failureHook) DialHook(next goredis.DialHook) goredis.DialHook {
	// A dial that fails fails its command, counted there.
	return next
}

func (h failureHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if unanswered(err) {
			h.failed()
		}
		return err
	}
}

func (h failureHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		if unanswered(err) {
			h.failed()
		}
		return err
	}
}

// unanswered reports an error that says Redis did not answer.
func unanswered(err error) bool {
	switch {
	case err == nil, errors.Is(err, goredis.Nil), errors.Is(err, context.Canceled), errors.Is(err, goredis.ErrClosed):
		return false
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, new(net.Error)):
		return true
	}
	return !permanentReply(err)
}
