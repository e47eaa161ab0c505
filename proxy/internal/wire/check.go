package wire

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"gatekeeper/config"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/trajectory"
)

// Checked is what the checks before a turn learned of one agent request.
type Checked struct {
	// Path is the canonical escaped path below the provider prefix; ""
	// when the path has no single meaning.
	Path string
	// Probe: the request is a probe of the base URL, answered 200 before
	// any other check (Claude Code sends a HEAD at start).
	Probe   bool
	Tenant  *config.Tenant
	KeyHash [32]byte
	// Person is who signed in, when the key was a person's token; nil
	// for a virtual key.
	Person *trajectory.Person
}

// Check runs the checks every request to a provider of API api passes
// before it is a turn or a pass-through: rest (the escaped path below the
// provider prefix, as the agent spelled it) has one canonical spelling,
// tid (the path's trajectory id; "" when none) is well formed, the
// virtual key is one of kr's (the one in HeaderKey when sent), a tenant
// with credentials: forward sent it there and a provider credential of its
// own besides, the betas asked for are the tenant's, and the request asks
// for no WebSocket. The error is an *apierr.Error.
func Check(r *http.Request, kr *Keyring, api, tid, rest string) (Checked, error) {
	// A turn path however spelled is the turn path: classified and
	// forwarded in its one canonical spelling, so that no other spelling
	// passes as something else.
	canon, err := CanonicalPath(rest)
	if err != nil {
		return Checked{}, apierr.New(http.StatusBadRequest, apierr.InvalidRequest, fmt.Sprintf(
			"the path %q has no single meaning (an escaped /, a dot or empty segment, or a broken escape); send the path in its plain form", rest))
	}
	c := Checked{Path: canon}
	if canon == "/" && (r.Method == http.MethodHead || r.Method == http.MethodGet && r.Header.Get("Upgrade") == "") {
		c.Probe = true
		return c, nil
	}
	if tid != "" && !trajectory.ValidID(tid) {
		return c, apierr.New(http.StatusBadRequest, apierr.InvalidRequest,
			"trajectory id in the path must be 1-128 characters of A-Z a-z 0-9 . _ : -")
	}
	if r.Header.Get(HeaderChatGPTAccount) != "" {
		return c, apierr.New(http.StatusBadRequest, apierr.InvalidRequest,
			"this request carries a ChatGPT sign-in (chatgpt-account-id), which gatekeeper does not forward: a ChatGPT sign-in works only with "+
				"ChatGPT's own backend, not the OpenAI API; sign the client in with an OpenAI API key (for Codex: codex login --with-api-key, "+
				"or a custom provider with env_key) and send the gatekeeper key as your platform team says")
	}
	vk, inHeader := virtualKey(r)
	if c.Tenant, c.KeyHash, c.Person, err = kr.Resolve(r.Context(), vk); err != nil {
		return c, err
	}
	if c.Tenant == nil {
		return c, apierr.New(http.StatusUnauthorized, apierr.Authentication,
			"invalid or missing gatekeeper virtual key: send the key your platform team issued as x-api-key, Authorization: Bearer, x-goog-api-key or "+HeaderKey)
	}
	if c.Tenant.Forwards() {
		if err := checkForwarded(r, vk, inHeader); err != nil {
			return c, err
		}
	}
	if err := CheckBetas(c.Tenant.AnthropicBeta, api, r.Header); err != nil {
		return c, err
	}
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		// Codex CLI tries a WebSocket on GET /v1/responses first; refusing
		// the upgrade at once makes it fall back to HTTP streaming.
		return c, apierr.New(http.StatusUpgradeRequired, apierr.InvalidRequest,
			"gatekeeper serves the Responses API over HTTP streaming only; WebSocket turns are not supported")
	}
	return c, nil
}

// HeaderChatGPTAccount is the header Codex CLI adds to every request when
// it is signed in with a ChatGPT account rather than an API key. Such a
// request's bearer token is good only at ChatGPT's own backend (another
// host, other paths, the subscription's terms), so gatekeeper refuses it
// rather than forward it anywhere.
const HeaderChatGPTAccount = "Chatgpt-Account-Id"

// checkForwarded checks a request of a tenant whose agents reach the
// provider with their own credential: the virtual key vk came in
// HeaderKey (inHeader), the request carries a provider credential, and
// none of its credentials is the virtual key, which never leaves
// gatekeeper.
func checkForwarded(r *http.Request, vk string, inHeader bool) error {
	if !inHeader {
		return apierr.New(http.StatusUnauthorized, apierr.Authentication,
			"this gatekeeper key's tenant sends your own provider credential on: send the gatekeeper key in the "+HeaderKey+
				" header (Claude Code: ANTHROPIC_CUSTOM_HEADERS) and your provider API key or sign-in token as the provider expects it")
	}
	creds := Credentials(r)
	if len(creds) == 0 {
		return apierr.New(http.StatusUnauthorized, apierr.Authentication,
			"no provider credential: this gatekeeper key's tenant sends your own credential to the provider, "+
				"so send your provider API key or sign-in token (x-api-key, Authorization, x-goog-api-key or the key parameter) besides "+HeaderKey)
	}
	for _, c := range creds {
		if subtle.ConstantTimeCompare([]byte(c), []byte(vk)) == 1 {
			return apierr.New(http.StatusUnauthorized, apierr.Authentication,
				"the provider credential is the gatekeeper key, which never goes to the provider: send your own provider credential, and the gatekeeper key in "+HeaderKey+" only")
		}
	}
	return nil
}
