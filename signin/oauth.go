package signin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"gatekeeper/config"
	"gatekeeper/identity"
)

// OAuth error codes (RFC 6749 §5.2, RFC 8628 §3.5) Claude Code acts on.
const (
	errPending     = "authorization_pending"
	errSlowDown    = "slow_down"
	errDenied      = "access_denied"
	errExpired     = "expired_token"
	errInvalid     = "invalid_grant"
	errRequest     = "invalid_request"
	errUnsupported = "unsupported_grant_type"
	errUnavailable = "temporarily_unavailable"
)

// oauthError is an answer of a sign-in endpoint in OAuth's error form.
type oauthError struct {
	status int
	code   string
	desc   string
}

func (e *oauthError) Error() string { return e.code + ": " + e.desc }

func writeOAuthError(w http.ResponseWriter, e *oauthError) {
	body := map[string]string{"error": e.code}
	if e.desc != "" {
		body["error_description"] = e.desc
	}
	writeJSON(w, e.status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// readForm reads a sign-in request's form, bounded; unknown parameters are
// ignored, as OAuth servers must.
func readForm(w http.ResponseWriter, r *http.Request) (url.Values, *oauthError) {
	r.Body = http.MaxBytesReader(w, r.Body, formBodyLimit)
	if err := r.ParseForm(); err != nil {
		return nil, &oauthError{http.StatusBadRequest, errRequest, "the body must be an application/x-www-form-urlencoded form of at most 16 KiB"}
	}
	for k, v := range r.PostForm {
		if len(v) > 1 && (k == "grant_type" || k == "device_code" || k == "refresh_token" || k == "token") {
			// RFC 6749 §3.2: parameters must not be repeated; two readers
			// could take different ones.
			return nil, &oauthError{http.StatusBadRequest, errRequest, "parameter " + k + " is repeated"}
		}
	}
	return r.PostForm, nil
}

// device starts a device authorization at the provider as the configured
// client and hands Claude Code the provider's codes and verification page.
func (s *Server) device(w http.ResponseWriter, r *http.Request, cfg *config.Config) {
	if _, oe := readForm(w, r); oe != nil {
		writeOAuthError(w, oe)
		return
	}
	idp, err := s.endpoints(r.Context(), cfg)
	if err != nil {
		s.unavailable(w, r, err)
		return
	}
	form := url.Values{"client_id": {cfg.Identity.ClientID}, "scope": {strings.Join(scopes(cfg), " ")}}
	status, body, err := s.post(r.Context(), idp.device, form)
	if err != nil {
		s.unavailable(w, r, err)
		return
	}
	da, oe := parseDeviceReply(status, body)
	if oe != nil {
		s.opts.Logger.LogAttrs(r.Context(), slog.LevelWarn, "gateway sign-in: the identity provider refused a device authorization",
			slog.Int("status", status), slog.String("error", oe.code))
		writeOAuthError(w, oe)
		return
	}
	writeJSON(w, http.StatusOK, da)
}

// token answers Claude Code's token polls and refreshes by relaying them
// to the provider. A token the provider issues is handed over only once
// gatekeeper admits its person (signature, audience, a group mapped to a
// tenant), so that a sign-in that could make no turn fails at sign-in.
func (s *Server) token(w http.ResponseWriter, r *http.Request, cfg *config.Config) {
	form, oe := readForm(w, r)
	if oe != nil {
		writeOAuthError(w, oe)
		return
	}
	grant := form.Get("grant_type")
	out := url.Values{"grant_type": {grant}, "client_id": {cfg.Identity.ClientID}}
	switch grant {
	case DeviceGrant:
		if form.Get("device_code") == "" {
			writeOAuthError(w, &oauthError{http.StatusBadRequest, errRequest, "device_code is required"})
			return
		}
		out.Set("device_code", form.Get("device_code"))
	case RefreshGrant:
		rt := form.Get("refresh_token")
		if rt == "" {
			writeOAuthError(w, &oauthError{http.StatusBadRequest, errRequest, "refresh_token is required"})
			return
		}
		revoked, err := s.opts.Revocations.Revoked(r.Context(), TokenKey(rt))
		if err != nil {
			s.unavailable(w, r, err)
			return
		}
		if revoked {
			writeOAuthError(w, &oauthError{http.StatusUnauthorized, errInvalid, "the sign-in was revoked; sign in again"})
			return
		}
		out.Set("refresh_token", rt)
	default:
		writeOAuthError(w, &oauthError{http.StatusBadRequest, errUnsupported, "grant_type must be " + DeviceGrant + " or refresh_token"})
		return
	}
	idp, err := s.endpoints(r.Context(), cfg)
	if err != nil {
		s.unavailable(w, r, err)
		return
	}
	status, body, err := s.post(r.Context(), idp.token, out)
	if err != nil {
		s.unavailable(w, r, err)
		return
	}
	tok, oe := parseTokenReply(status, body)
	if oe != nil {
		if grant == RefreshGrant && oe.code != errUnavailable {
			// The protocol's deprovisioning hook: 401 invalid_grant sends
			// the person back through the browser, where a person the
			// provider disabled cannot sign in.
			oe = &oauthError{http.StatusUnauthorized, errInvalid, "your identity provider refused to renew the sign-in; sign in again"}
		}
		if oe.code != errPending && oe.code != errSlowDown {
			s.opts.Logger.LogAttrs(r.Context(), slog.LevelInfo, "gateway sign-in: token refused",
				slog.String("grant", grant), slog.Int("provider_status", status), slog.String("error", oe.code))
		}
		writeOAuthError(w, oe)
		return
	}
	p, tenant, err := s.verifier(cfg).Verify(r.Context(), tok.AccessToken)
	switch {
	case errors.Is(err, identity.ErrNoTenant):
		writeOAuthError(w, &oauthError{http.StatusBadRequest, errDenied,
			fmt.Sprintf("signed in as %s, but none of your identity provider's groups is mapped to a gatekeeper tenant; ask your platform team to map one (identity.groups)", p.Label())})
		return
	case errors.Is(err, identity.ErrIssuer):
		s.unavailable(w, r, err)
		return
	case err != nil:
		// The provider's token is not one gatekeeper admits (its audience
		// is not identity.audience, say): signing in would change nothing.
		s.opts.Logger.LogAttrs(r.Context(), slog.LevelError, "gateway sign-in: the identity provider issued a token gatekeeper does not admit",
			slog.String("error", err.Error()))
		status := http.StatusBadRequest
		if grant == RefreshGrant {
			status = http.StatusUnauthorized
		}
		writeOAuthError(w, &oauthError{status, errInvalid, "the identity provider's token is not one this gatekeeper admits (check identity.audience)"})
		return
	}
	if tok.RefreshToken == "" && grant == RefreshGrant {
		tok.RefreshToken = form.Get("refresh_token") // the provider keeps the old one valid
	}
	s.opts.Logger.LogAttrs(r.Context(), slog.LevelInfo, "gateway sign-in: token issued",
		slog.String("grant", grant), slog.String("subject", p.Subject), slog.String("tenant", tenant))
	writeJSON(w, http.StatusOK, tok)
}

// revoke forgets a token (RFC 7009): every replica refuses it from now
// until it would have expired, and the provider is asked to revoke it
// too. The answer is 200 whatever the token was, as the RFC asks.
func (s *Server) revoke(w http.ResponseWriter, r *http.Request, cfg *config.Config) {
	form, oe := readForm(w, r)
	if oe != nil {
		writeOAuthError(w, oe)
		return
	}
	tok := form.Get("token")
	if tok == "" {
		writeOAuthError(w, &oauthError{http.StatusBadRequest, errRequest, "token is required"})
		return
	}
	// An access token is refused until its expiry; a refresh token's
	// lifetime is the provider's, so it is remembered for a long while.
	until := s.opts.Now().Add(refreshMemory)
	if identity.LooksLikeToken(tok) {
		if exp, ok := identity.Expiry(tok); ok && exp.Before(until) {
			until = exp
		}
	}
	if err := s.opts.Revocations.Revoke(r.Context(), TokenKey(tok), until); err != nil {
		s.unavailable(w, r, err)
		return
	}
	if idp, err := s.endpoints(r.Context(), cfg); err == nil && idp.revocation != "" {
		f := url.Values{"token": {tok}, "client_id": {cfg.Identity.ClientID}}
		if h := form.Get("token_type_hint"); h != "" {
			f.Set("token_type_hint", h)
		}
		if status, _, err := s.post(r.Context(), idp.revocation, f); err != nil || status != http.StatusOK {
			s.opts.Logger.LogAttrs(r.Context(), slog.LevelWarn, "gateway sign-in: the identity provider did not confirm a revocation; gatekeeper refuses the token anyway",
				slog.Int("status", status), slog.Any("error", err))
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
}

// refreshMemory is how long a revoked refresh token is remembered: longer
// than any provider keeps one valid without use.
const refreshMemory = 90 * 24 * time.Hour

// unavailable answers that the provider (or the store) could not be
// reached: Claude Code keeps its sign-in and tries again later.
func (s *Server) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	s.opts.Logger.LogAttrs(r.Context(), slog.LevelError, "gateway sign-in: unavailable", slog.String("error", err.Error()))
	w.Header().Set("Retry-After", "5")
	writeOAuthError(w, &oauthError{http.StatusServiceUnavailable, errUnavailable, "gatekeeper cannot reach the identity provider; try again shortly"})
}

// post sends form to the provider and returns its status and body (at
// most replyLimit bytes).
func (s *Server) post(ctx context.Context, endpoint string, form url.Values) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := s.opts.Client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", errIssuer, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := io.Copy(&b, io.LimitReader(resp.Body, replyLimit+1)); err != nil {
		return 0, nil, fmt.Errorf("%w: reading its answer: %v", errIssuer, err)
	}
	if b.Len() > replyLimit {
		return 0, nil, fmt.Errorf("%w: its answer is over %d bytes", errIssuer, replyLimit)
	}
	return resp.StatusCode, b.Bytes(), nil
}
