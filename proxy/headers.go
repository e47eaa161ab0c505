package proxy

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"gatekeeper/config"
)

// strippedHeaders never go from an agent to a provider: they would bill the
// shared key to another organization or project, or hand the provider the
// agent's cookies. The key's own organization and project, when config
// sets them, are sent instead (setProviderKey).
var strippedHeaders = []string{"Cookie", "Openai-Organization", "Openai-Project"}

// stripAgentHeaders removes what an agent may not send on with a provider
// key: its own credentials, gatekeeper's headers and strippedHeaders.
func stripAgentHeaders(h http.Header) {
	h.Del("X-Api-Key")
	h.Del("Authorization")
	for _, k := range strippedHeaders {
		h.Del(k)
	}
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "x-gatekeeper-") {
			h.Del(k)
		}
	}
}

// setProviderKey puts a provider key in the provider's own auth header,
// with the key's organization and project when config sets them.
func setProviderKey(h http.Header, up *upstream, key string) {
	if up.cfg.API == "anthropic" {
		h.Set("X-Api-Key", key)
	} else {
		h.Set("Authorization", "Bearer "+key)
	}
	if k := up.keyConf[key]; k != nil {
		if k.Organization != "" {
			h.Set("OpenAI-Organization", k.Organization)
		}
		if k.Project != "" {
			h.Set("OpenAI-Project", k.Project)
		}
	}
}

// checkBetas refuses an Anthropic request naming a beta outside its
// tenant's anthropic_beta list; a tenant without a list may send any (Claude
// Code needs its betas forwarded verbatim). A beta that enables a field is
// refused rather than dropped: without it the provider refuses the field
// with a message that would not say why.
func checkBetas(t *config.Tenant, up *upstream, h http.Header) error {
	if len(t.AnthropicBeta) == 0 || up.cfg.API != config.APIAnthropic {
		return nil
	}
	for _, v := range h.Values("Anthropic-Beta") {
		for beta := range strings.SplitSeq(v, ",") {
			beta = strings.TrimSpace(beta)
			if beta == "" || slices.Contains(t.AnthropicBeta, beta) {
				continue
			}
			return httpErr(http.StatusBadRequest, errInvalidRequest, fmt.Sprintf(
				"anthropic-beta %q is not allowed for this tenant (tenants[].anthropic_beta); drop it or ask an operator to allow it", beta))
		}
	}
	return nil
}
