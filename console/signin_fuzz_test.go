package console

import (
	"encoding/base64"
	"testing"
)

// FuzzParseLogin: the login cookie comes back from the browser as any
// bytes; parseLogin never panics, and accepts only a cookie holding all
// three values, within its bound.
func FuzzParseLogin(f *testing.F) {
	for _, s := range []string{
		"",
		base64.RawURLEncoding.EncodeToString([]byte(`{"s":"a","n":"b","v":"c"}`)),
		base64.RawURLEncoding.EncodeToString([]byte(`{"s":"a","n":"","v":"c"}`)),
		base64.RawURLEncoding.EncodeToString([]byte(`{"s":"a","S":"b","n":"b","v":"c"}`)),
		base64.RawURLEncoding.EncodeToString([]byte(`[1,2]`)),
		"eyJzIjoiYSJ9",
		"!!!",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		pl, ok := parseLogin(v)
		if ok && (pl.State == "" || pl.Nonce == "" || pl.Verifier == "" || len(v) > maxLoginCookie) {
			t.Fatalf("accepted %q as %+v", v, pl)
		}
		if !ok && pl != (pendingLogin{}) {
			t.Fatalf("refused %q but returned %+v", v, pl)
		}
	})
}

// TestParseLoginRoundTrip: what login writes, the callback reads back.
func TestParseLoginRoundTrip(t *testing.T) {
	pl := pendingLogin{State: random(), Nonce: random(), Verifier: random()}
	got, ok := parseLogin(encodeLogin(pl))
	if !ok || got != pl {
		t.Fatalf("got %+v %v, want %+v", got, ok, pl)
	}
}
