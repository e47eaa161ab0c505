// Package passthrough owns the way a request leaves for its provider
// outside a turn's send path: the reverse proxy of a provider's
// pass-through requests (its rewrite onto the provider's base URL with a
// provider key in place of the agent's virtual key, the redaction of its
// error replies, its answer when the provider cannot be reached), the
// provider header every outgoing request gets (turns' too), the check of
// the run a pass-through request names, and the unreachable-provider
// error. Errors are returned as an *Error or ErrClientGone, which the
// caller puts in the agent's error form.
package passthrough
