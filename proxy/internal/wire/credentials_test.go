package wire

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestCredentials(t *testing.T) {
	cases := []struct {
		name  string
		hdr   http.Header
		query string
		want  []string
	}{
		{"none", http.Header{"Content-Type": {"application/json"}}, "alt=sse", nil},
		{"api key", http.Header{"X-Api-Key": {"sk-1"}}, "", []string{"sk-1"}},
		{"bearer", http.Header{"Authorization": {"Bearer sk-ant-oat01-x"}}, "", []string{"sk-ant-oat01-x"}},
		{"bearer any case", http.Header{"Authorization": {"bEaReR  tok "}}, "", []string{"tok"}},
		{"other scheme kept whole", http.Header{"Authorization": {"Basic dXNlcg=="}}, "", []string{"Basic dXNlcg=="}},
		{"every header", http.Header{"X-Api-Key": {"a", "b"}, "Authorization": {"Bearer c"}, "X-Goog-Api-Key": {"d"}}, "", []string{"a", "b", "c", "d"}},
		{"query", nil, "alt=sse&key=AIza1&%6Bey=AIza2", []string{"AIza1", "AIza2"}},
		{"escaped value", nil, "key=a%2Bb", []string{"a+b"}},
		{"twice once", http.Header{"X-Api-Key": {"same"}, "X-Goog-Api-Key": {"same"}}, "", []string{"same"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &http.Request{Header: tc.hdr, URL: &url.URL{RawQuery: tc.query}}
			if r.Header == nil {
				r.Header = http.Header{}
			}
			if got := Credentials(r); !slices.Equal(got, tc.want) {
				t.Errorf("Credentials = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestQueryCredential(t *testing.T) {
	cases := map[string]string{
		"":                         "",
		"alt=sse":                  "",
		"alt=sse&key=AIza1":        "key=AIza1",
		"%6Bey=AIza1&alt=sse&key=": "%6Bey=AIza1&key=",
		"keys=1&monkey=2":          "",
	}
	for q, want := range cases {
		if got := QueryCredential(q); got != want {
			t.Errorf("QueryCredential(%q) = %q, want %q", q, got, want)
		}
	}
}

// FuzzCredentials: whatever query an agent sends, every credential
// QueryCredential keeps is one Credentials finds, and what ForwardQuery
// leaves holds none of the key parameters.
func FuzzCredentials(f *testing.F) {
	for _, s := range []string{"", "key=a", "alt=sse&key=AIza&key=b", "%6Bey=x", "key=%zz", "&&key", "k%65y=1;key=2"} {
		f.Add(s, "Bearer tok")
	}
	f.Fuzz(func(t *testing.T, query, auth string) {
		r := &http.Request{Header: http.Header{"Authorization": {auth}}, URL: &url.URL{RawQuery: query}}
		creds := Credentials(r)
		kept := QueryCredential(query)
		for _, v := range queryValues(kept, queryKey) {
			if v = strings.TrimSpace(v); v != "" && !slices.Contains(creds, v) {
				t.Fatalf("QueryCredential kept %q, which Credentials %q misses", v, creds)
			}
		}
		if len(queryValues(ForwardQuery(query), queryKey)) != 0 {
			t.Fatalf("ForwardQuery(%q) kept a key parameter", query)
		}
	})
}
