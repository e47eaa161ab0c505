package wire

import (
	"net/http"
	"path"

	"gatekeeper/config"
)

// Pass-through: requests that are not turns. Each spends the shared
// provider key and none is metered or gated, so only an allowlist passes:
// per API, what neither generates output nor touches stored objects, and
// what an operator allows in providers[].passthrough. Everything else
// (legacy completions, batches, files, stored responses, realtime
// secrets...) is refused with 404 and never reaches the provider.

// builtinPassthrough is what passes by default, per provider API.
var builtinPassthrough = map[string][]config.Passthrough{
	config.APIAnthropic: {
		{Method: http.MethodGet, Path: "/v1/models"},
		{Method: http.MethodGet, Path: "/v1/models/*"},
		{Method: http.MethodPost, Path: "/v1/messages/count_tokens"},
	},
	config.APIOpenAI: {
		{Method: http.MethodGet, Path: "/v1/models"},
		{Method: http.MethodGet, Path: "/v1/models/*"},
	},
	// countTokens costs nothing at Google and generates nothing.
	config.APIGemini: {
		{Method: http.MethodGet, Path: "/v1beta/models"},
		{Method: http.MethodGet, Path: "/v1beta/models/*"},
		{Method: http.MethodPost, Path: "/v1beta/models/*:countTokens"},
		{Method: http.MethodGet, Path: "/v1/models"},
		{Method: http.MethodGet, Path: "/v1/models/*"},
		{Method: http.MethodPost, Path: "/v1/models/*:countTokens"},
	},
}

// Allowlist is a provider's pass-through allowlist: the built-in one of
// its API and config's.
func Allowlist(p *config.Provider) []config.Passthrough {
	return append(append([]config.Passthrough(nil), builtinPassthrough[p.API]...), p.Passthrough...)
}

// Passes reports whether method and the canonical path p may pass
// through list. HEAD passes where GET does.
func Passes(list []config.Passthrough, method, p string) bool {
	for _, e := range list {
		if e.Method != method && !(method == http.MethodHead && e.Method == http.MethodGet) {
			continue
		}
		if ok, _ := path.Match(e.Path, p); ok { // patterns are checked by config
			return true
		}
	}
	return false
}

// RetrievalPath is a stored response's retrieval, the path whose
// pass-through lets a background response's output be fetched.
const RetrievalPath = "/v1/responses/resp_0"
