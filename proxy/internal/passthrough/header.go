package passthrough

import (
	"net/http"

	"gatekeeper/proxy/internal/keys"
	"gatekeeper/proxy/internal/wire"
)

// ProviderHeader makes the agent's headers h the provider's: the agent's
// keys, gatekeeper's own headers and the other headers of the header
// policy dropped (wire.StripAgentHeaders), key, one of pool's, put in,
// the caller's trace context added by trace (nil: none), and the reply
// asked for uncompressed: a turn's is decoded while it streams, a
// pass-through error reply is read to redact key fragments. Every model
// call's send (turns and continuations alike) and the pass-through
// rewrite go through it.
func ProviderHeader(h http.Header, pool *keys.Pool, key string, trace func(http.Header)) {
	wire.StripAgentHeaders(h)
	pool.SetKey(h, key)
	finishHeader(h, trace)
}

// ForwardedHeader is ProviderHeader for a tenant whose agents reach the
// provider with their own credential (tenants[].credentials: forward):
// the agent's provider-auth headers stay as they came
// (wire.StripForwardedHeaders) and no pool key is put in.
func ForwardedHeader(h http.Header, trace func(http.Header)) {
	wire.StripForwardedHeaders(h)
	finishHeader(h, trace)
}

func finishHeader(h http.Header, trace func(http.Header)) {
	if trace != nil {
		// The provider sees the turn's span as the caller of its call.
		trace(h)
	}
	h.Set("Accept-Encoding", "identity")
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = nil // send none rather than Go's default
	}
}
