package signin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"gatekeeper/config"
	"gatekeeper/identity"
)

// settingsDoc is the managed settings answer Claude Code expects.
type settingsDoc struct {
	UUID     string         `json:"uuid"`
	Checksum string         `json:"checksum"`
	Settings map[string]any `json:"settings"`
}

// settings answers GET /managed/settings: the managed settings of the
// first configured group the bearer's person is in, with the checksum
// Claude Code computes itself (so that its If-None-Match gets a 304), or
// 404 when no group's settings apply.
func (s *Server) settings(w http.ResponseWriter, r *http.Request, cfg *config.Config) {
	tok, ok := bearer(r)
	if !ok {
		writeAnthropicError(w, http.StatusUnauthorized, "authentication_error", "sign in first: send the gateway token as Authorization: Bearer")
		return
	}
	revoked, err := s.opts.Revocations.Revoked(r.Context(), TokenKey(tok))
	if err != nil {
		w.Header().Set("Retry-After", "5")
		writeAnthropicError(w, http.StatusServiceUnavailable, "api_error", "gatekeeper cannot check your sign-in now; retry shortly")
		return
	}
	if revoked {
		writeAnthropicError(w, http.StatusUnauthorized, "authentication_error", "your sign-in was revoked; run /login again")
		return
	}
	p, _, err := s.verifier(cfg).Verify(r.Context(), tok)
	switch {
	case errors.Is(err, identity.ErrIssuer):
		w.Header().Set("Retry-After", "5")
		writeAnthropicError(w, http.StatusServiceUnavailable, "api_error", "gatekeeper cannot reach the identity provider to check your sign-in; retry shortly")
		return
	case err != nil && !errors.Is(err, identity.ErrNoTenant):
		writeAnthropicError(w, http.StatusUnauthorized, "authentication_error", "your sign-in token was refused (expired, revoked, or not issued for this gatekeeper); run /login again")
		return
	}
	i := slices.IndexFunc(cfg.Identity.Gateway.Settings, func(g config.GroupSettings) bool { return slices.Contains(p.Groups, g.Group) })
	if i < 0 {
		http.Error(w, "no managed settings for your groups", http.StatusNotFound)
		return
	}
	g := cfg.Identity.Gateway.Settings[i]
	doc, err := settingsFor(g)
	if err != nil {
		writeAnthropicError(w, http.StatusInternalServerError, "api_error", "gatekeeper cannot encode the managed settings; see its logs")
		return
	}
	etag := `"` + doc.Checksum + `"`
	w.Header().Set("ETag", etag)
	if inm := r.Header.Get("If-None-Match"); inm != "" && inm == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(doc)
}

// settingsFor is the document of g's settings.
func settingsFor(g config.GroupSettings) (*settingsDoc, error) {
	set := g.Settings
	if set == nil {
		set = map[string]any{}
	}
	sum, err := Checksum(set)
	if err != nil {
		return nil, err
	}
	id := sha256.Sum256([]byte("gatekeeper-managed-settings\x00" + g.Group))
	h := hex.EncodeToString(id[:16])
	return &settingsDoc{UUID: h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32], Checksum: sum, Settings: set}, nil
}

// Checksum is Claude Code's checksum of managed settings: "sha256:" and the
// hex SHA-256 of their JSON with keys sorted at every level and no
// whitespace, as JavaScript's JSON.stringify writes it (no HTML escaping).
func Checksum(settings map[string]any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(settings); err != nil { // maps encode with sorted keys
		return "", fmt.Errorf("signin: managed settings: %w", err)
	}
	sum := sha256.Sum256(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// bearer is the request's Authorization: Bearer token.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") {
		return "", false
	}
	t := strings.TrimSpace(h[7:])
	return t, t != ""
}

// writeAnthropicError answers a bearer-authenticated endpoint in the
// Anthropic error envelope, which Claude Code shows; an authentication
// error is final (x-should-retry: false), so the client asks the person to
// sign in again at once.
func writeAnthropicError(w http.ResponseWriter, status int, typ, msg string) {
	if status == http.StatusUnauthorized {
		w.Header().Set("X-Should-Retry", "false")
	}
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
}
