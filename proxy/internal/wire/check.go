package wire

import (
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
// virtual key is one of kr's, the betas asked for are the tenant's, and
// the request asks for no WebSocket. The error is an *apierr.Error.
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
	if c.Tenant, c.KeyHash, c.Person, err = kr.Resolve(r.Context(), PresentedKey(r)); err != nil {
		return c, err
	}
	if c.Tenant == nil {
		return c, apierr.New(http.StatusUnauthorized, apierr.Authentication,
			"invalid or missing gatekeeper virtual key: send the key your platform team issued as x-api-key, Authorization: Bearer or x-goog-api-key")
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
