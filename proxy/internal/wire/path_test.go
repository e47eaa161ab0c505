package wire_test

import (
	"errors"
	"strings"
	"testing"

	"gatekeeper/proxy/internal/wire"
)

func TestCanonicalPath(t *testing.T) {
	tests := []struct {
		name, in, want string // want "" for a refusal
	}{
		{"canonical", "/v1/messages", "/v1/messages"},
		{"empty", "", "/"},
		{"root", "/", "/"},
		{"trailing slash", "/v1/messages/", "/v1/messages"},
		{"encoded unreserved", "/v1/m%65ssages", "/v1/messages"},
		{"encoded lowercase hex", "/v1/%6d%65ssages", "/v1/messages"},
		{"encoded colon kept literal", "/v1/models/ft%3Agpt-4o%3Aorg", "/v1/models/ft:gpt-4o:org"},
		{"space stays escaped", "/v1/files/a%20b", "/v1/files/a%20b"},
		{"raw space escaped", "/v1/files/a b", "/v1/files/a%20b"},
		{"semicolon escaped", "/v1/messages;x", "/v1/messages%3Bx"},
		{"question mark stays escaped", "/v1/a%3fb", "/v1/a%3Fb"},
		{"utf-8 escaped", "/v1/files/\xc3\xa9", "/v1/files/%C3%A9"},
		{"encoded slash", "/v1%2Fmessages", ""},
		{"encoded slash lowercase", "/v1%2fmessages", ""},
		{"encoded backslash", "/v1/a%5Cb", ""},
		{"backslash", "/v1/a\\b", ""},
		{"dot segment", "/v1/./messages", ""},
		{"dot dot segment", "/v2/../v1/messages", ""},
		{"encoded dot dot", "/v1/%2e%2e/messages", ""},
		{"dots inside a segment", "/v1/a..b", ""},
		{"empty segment", "/v1//messages", ""},
		{"leading double slash", "//v1/messages", ""},
		{"two trailing slashes", "/v1/messages//", ""},
		{"broken escape", "/v1/mess%4", ""},
		{"bad hex", "/v1/mess%zzages", ""},
		{"encoded NUL", "/v1/messages%00", ""},
		{"control byte", "/v1/mess\tages", ""},
		{"relative", "v1/messages", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := wire.CanonicalPath(tc.in)
			if tc.want == "" {
				if !errors.Is(err, wire.ErrPathAmbiguous) {
					t.Fatalf("wire.CanonicalPath(%q) = %q, %v; want a refusal", tc.in, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("wire.CanonicalPath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

// FuzzCanonicalPath: a canonical form is its own canonical form, and none
// holds an escaped '/', a ".." or an empty segment.
func FuzzCanonicalPath(f *testing.F) {
	for _, s := range []string{"/v1/messages", "/v1/messages/", "/v1/m%65ssages", "/v1%2Fmessages", "/v1/../x",
		"/v1//x", "/v1/%2e%2e/x", "/v1/a%3Bb", "/v1/files/%C3%A9", "/%", "/v1/responses/resp_1/input_items", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		c, err := wire.CanonicalPath(in)
		if err != nil {
			return
		}
		again, err := wire.CanonicalPath(c)
		if err != nil || again != c {
			t.Fatalf("canonical form %q of %q canonicalises to %q, %v", c, in, again, err)
		}
		lower := strings.ToLower(c)
		if strings.Contains(lower, "%2f") || strings.Contains(c, "..") || strings.Contains(c, "//") || strings.Contains(lower, "%5c") {
			t.Fatalf("canonical form %q of %q holds %%2F, .., // or %%5C", c, in)
		}
		if c != "/" && strings.HasSuffix(c, "/") {
			t.Fatalf("canonical form %q of %q ends in /", c, in)
		}
	})
}
