package signin

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
)

// deviceAuthorization is a device authorization response (RFC 8628 §3.2),
// the fields Claude Code reads.
type deviceAuthorization struct {
	DeviceCode              string `json:"device_code"`
	UserCode                string `json:"user_code"`
	VerificationURI         string `json:"verification_uri"`
	VerificationURIComplete string `json:"verification_uri_complete,omitempty"`
	ExpiresIn               int64  `json:"expires_in"`
	Interval                int64  `json:"interval,omitempty"`
}

// tokenReply is a token response (RFC 6749 §5.1), the fields Claude Code
// reads.
type tokenReply struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in"`
	RefreshToken string `json:"refresh_token,omitempty"`
}

// The bounds on what is relayed from the provider to Claude Code.
const (
	maxCodeLen  = 4096  // a device code, user code or URL
	maxTokenLen = 16384 // an access or refresh token
	maxLifetime = 366 * 24 * 3600
)

// parseDeviceReply reads the provider's answer to a device authorization.
// Anything but a well-formed success is an OAuth error to relay: the
// provider's own error code when it sent one Claude Code knows, else
// temporarily_unavailable.
func parseDeviceReply(status int, body []byte) (*deviceAuthorization, *oauthError) {
	if status != http.StatusOK {
		return nil, providerError(status, body)
	}
	var da deviceAuthorization
	if err := decodeStrict(body, &da); err != nil {
		return nil, malformed("device authorization")
	}
	if da.DeviceCode == "" || da.UserCode == "" || !webURL(da.VerificationURI) || (da.VerificationURIComplete != "" && !webURL(da.VerificationURIComplete)) ||
		len(da.DeviceCode) > maxCodeLen || len(da.UserCode) > maxCodeLen || len(da.VerificationURI) > maxCodeLen || len(da.VerificationURIComplete) > maxCodeLen ||
		da.ExpiresIn <= 0 || da.ExpiresIn > maxLifetime || da.Interval < 0 || da.Interval > 3600 {
		return nil, malformed("device authorization")
	}
	return &da, nil
}

// parseTokenReply reads the provider's answer to a token request.
func parseTokenReply(status int, body []byte) (*tokenReply, *oauthError) {
	if status != http.StatusOK {
		return nil, providerError(status, body)
	}
	var t tokenReply
	if err := decodeStrict(body, &t); err != nil {
		return nil, malformed("token")
	}
	if t.AccessToken == "" || len(t.AccessToken) > maxTokenLen || len(t.RefreshToken) > maxTokenLen ||
		t.ExpiresIn <= 0 || t.ExpiresIn > maxLifetime || (t.TokenType != "" && !strings.EqualFold(t.TokenType, "bearer")) {
		return nil, malformed("token")
	}
	t.TokenType = "Bearer"
	return &t, nil
}

// providerError is the OAuth error to answer for a provider's refusal:
// its code when Claude Code acts on it, with the status the protocol
// gives it.
func providerError(status int, body []byte) *oauthError {
	var e struct {
		Code string `json:"error"`
		Desc string `json:"error_description"`
	}
	if status >= 500 || decodeStrict(body, &e) != nil {
		return &oauthError{http.StatusServiceUnavailable, errUnavailable, "the identity provider did not answer as expected"}
	}
	desc := e.Desc
	if len(desc) > 500 {
		desc = desc[:500]
	}
	desc = strings.ToValidUTF8(desc, "")
	switch e.Code {
	case errPending, errSlowDown, errDenied, errExpired, errInvalid:
		return &oauthError{http.StatusBadRequest, e.Code, desc}
	case "":
		return &oauthError{http.StatusServiceUnavailable, errUnavailable, "the identity provider did not answer as expected"}
	}
	return &oauthError{http.StatusBadRequest, errDenied, "the identity provider refused: " + e.Code}
}

func malformed(what string) *oauthError {
	return &oauthError{http.StatusServiceUnavailable, errUnavailable, "the identity provider's " + what + " answer is malformed"}
}

// decodeStrict decodes one JSON object into v, refusing a body with
// members repeated under any spelling Go's decoder folds together (two
// readers could take different ones) or trailing data.
func decodeStrict(body []byte, v any) error {
	if err := uniqueMembers(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errTrailing
	}
	return nil
}

type decodeError string

func (e decodeError) Error() string { return string(e) }

const (
	errTrailing  = decodeError("data after the object")
	errRepeated  = decodeError("a member is repeated")
	errNotObject = decodeError("not a JSON object")
)

// uniqueMembers checks that body is an object whose top-level member
// names are distinct under case folding.
func uniqueMembers(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errNotObject
	}
	seen := map[string]bool{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := k.(string)
		low := strings.ToLower(name)
		if seen[low] {
			return errRepeated
		}
		seen[low] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	return nil
}

// webURL reports whether s is an absolute http(s) URL, the only kind a
// verification page may be (Claude Code opens it in a browser).
func webURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != ""
}
