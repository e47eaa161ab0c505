package signin

import (
	"net/http"
	"strings"
	"testing"
)

// FuzzReplies: whatever the provider answers, the parsers give a reply
// within bounds or an OAuth error Claude Code knows, never a panic; and a
// body with a member repeated under any case is never a success.
func FuzzReplies(f *testing.F) {
	for _, s := range []string{
		`{"device_code":"d","user_code":"U-1","verification_uri":"http://127.0.0.1/device","expires_in":300,"interval":1}`,
		`{"access_token":"eyJ.a.b","token_type":"Bearer","expires_in":300,"refresh_token":"r"}`,
		`{"access_token":"a","access_Token":"b","token_type":"Bearer","expires_in":300}`,
		`{"error":"authorization_pending"}`, `{"error":"slow_down","error_description":"wait"}`,
		`{"error":"weird"}`, `[]`, `{}`, `{"expires_in":-1}`, `{"access_token":"a","expires_in":1e99}`, "",
		`{"device_code":"d","user_code":"u","verification_uri":"javascript:alert(1)","expires_in":5}`,
	} {
		f.Add(200, []byte(s))
		f.Add(400, []byte(s))
	}
	known := []string{errPending, errSlowDown, errDenied, errExpired, errInvalid, errUnavailable}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		repeated := uniqueMembers(body) == errRepeated
		check := func(oe *oauthError) {
			t.Helper()
			ok := false
			for _, k := range known {
				ok = ok || oe.code == k
			}
			if !ok || (oe.status != http.StatusBadRequest && oe.status != http.StatusServiceUnavailable) {
				t.Fatalf("error %+v", oe)
			}
		}
		if tok, oe := parseTokenReply(status, body); oe != nil {
			check(oe)
		} else if repeated || status != 200 || tok.AccessToken == "" || tok.ExpiresIn <= 0 || tok.TokenType != "Bearer" || len(tok.AccessToken) > maxTokenLen {
			t.Fatalf("token reply %+v from %d %q", tok, status, body)
		}
		if da, oe := parseDeviceReply(status, body); oe != nil {
			check(oe)
		} else if repeated || status != 200 || !webURL(da.VerificationURI) || strings.HasPrefix(da.VerificationURI, "javascript") || da.ExpiresIn <= 0 {
			t.Fatalf("device reply %+v from %d %q", da, status, body)
		}
	})
}
