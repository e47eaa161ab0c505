// Package apierr owns the errors an agent receives: the Error type that
// keeps the status and message the agent sees apart from the detail kept
// for logs, the error types of gatekeeper's own refusals, and Write, the
// one writer of an error, which answers in the error format of the
// request's API (its dialect's) with the headers the official SDKs read
// (Retry-After, x-should-retry).
package apierr
