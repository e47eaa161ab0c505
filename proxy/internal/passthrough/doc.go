// Package passthrough owns the way a request leaves for its provider
// outside a turn's send path: a configured provider's upstream (its base
// URL and API family checked, its key pool, its allowlist), the upstream
// transport, the reverse proxy of a provider's pass-through requests (its
// rewrite onto the provider's base URL with a provider key in place of
// the agent's virtual key, the redaction of its error replies, its answer
// when the provider cannot be reached), the serving of a pass-through
// request (Gate.Serve: the allowlist, the run it names, its body and its
// key capacity, checked before it is forwarded), the provider header
// every outgoing request gets (turns' too), and the unreachable-provider
// error. The reverse proxy's errors are an *Error or ErrClientGone, which
// AgentError puts in the agent's error form.
package passthrough
