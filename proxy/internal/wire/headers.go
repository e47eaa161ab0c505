package wire

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"gatekeeper/config"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/threadid"
)

// strippedHeaders never go from an agent to a provider: they would bill the
// shared key to another organization or project, or hand the provider the
// agent's cookies. The key's own organization and project, when config
// sets them, are sent instead (SetProviderKey).
var strippedHeaders = []string{"Cookie", "Openai-Organization", "Openai-Project"}

// StripAgentHeaders removes what an agent may not send on with a provider
// key: its own credentials, gatekeeper's headers and strippedHeaders.
func StripAgentHeaders(h http.Header) {
	h.Del("X-Api-Key")
	h.Del("Authorization")
	h.Del("X-Goog-Api-Key")
	for _, k := range strippedHeaders {
		h.Del(k)
	}
	stripGatekeeper(h)
}

// StripForwardedHeaders removes what an agent that reaches the provider
// with its own credential (tenants[].credentials: forward) may not send
// on: gatekeeper's headers, its virtual key's among them, and its
// cookies. Its credential and its OpenAI organization and project go on
// unchanged: they name its own account, which the provider bills.
func StripForwardedHeaders(h http.Header) {
	h.Del("Cookie")
	stripGatekeeper(h)
}

func stripGatekeeper(h http.Header) {
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "x-gatekeeper-") {
			h.Del(k)
		}
	}
}

// SetProviderKey puts key, a key of a provider of api, in the provider's
// own auth header, with the key's organization and project when its
// config (conf, nil when none) sets them.
func SetProviderKey(h http.Header, api, key string, conf *config.ProviderKey) {
	switch api {
	case config.APIAnthropic:
		h.Set("X-Api-Key", key)
	case config.APIGemini:
		h.Set("X-Goog-Api-Key", key)
	default:
		h.Set("Authorization", "Bearer "+key)
	}
	if conf == nil {
		return
	}
	if conf.Organization != "" {
		h.Set("OpenAI-Organization", conf.Organization)
	}
	if conf.Project != "" {
		h.Set("OpenAI-Project", conf.Project)
	}
}

// CheckBetas refuses a request to a provider of api naming an Anthropic
// beta outside allowed, its tenant's anthropic_beta list; a tenant without a list may send any (Claude
// Code needs its betas forwarded verbatim). A beta that enables a field is
// refused rather than dropped: without it the provider refuses the field
// with a message that would not say why.
func CheckBetas(allowed []string, api string, h http.Header) error {
	if len(allowed) == 0 || api != config.APIAnthropic {
		return nil
	}
	for _, v := range h.Values("Anthropic-Beta") {
		for beta := range strings.SplitSeq(v, ",") {
			beta = strings.TrimSpace(beta)
			if beta == "" || slices.Contains(allowed, beta) {
				continue
			}
			return apierr.BadRequest(fmt.Sprintf(
				"anthropic-beta %q is not allowed for this tenant (tenants[].anthropic_beta); drop it or ask an operator to allow it", beta))
		}
	}
	return nil
}

// HeaderRun is the run a request's headers h name (threadid.FromHeaders,
// keyHash the virtual key's); "" when they name none. A malformed
// X-Gatekeeper-Trajectory is refused as an invalid request.
func HeaderRun(h http.Header, keyHash [32]byte) (string, error) {
	id, err := threadid.FromHeaders(h, keyHash)
	if err != nil {
		return "", apierr.New(http.StatusBadRequest, apierr.InvalidRequest, err.Error())
	}
	return id, nil
}
