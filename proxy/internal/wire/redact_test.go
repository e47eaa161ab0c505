package wire

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/mockprovider"
	"gatekeeper/streaming"
)

func TestRedactKeys(t *testing.T) {
	const key = "sk-proj-Q7xv2LmZ9aBcDeFgH1jK"
	keys := []string{key, "sk-ant-api03-zzzzYYYYxxxx"}
	tests := []struct{ name, in, want string }{
		{"whole key", `{"message":"bad key ` + key + `"}`, `{"message":"bad key [redacted]"}`},
		{"masked key", `{"message":"Incorrect API key provided: sk-proj-*************H1jK."}`, `{"message":"Incorrect API key provided: [redacted]."}`},
		{"bullets", "key sk-pr\u2022\u2022\u2022\u2022H1jK invalid", "key [redacted] invalid"},
		{"tail only", `{"message":"the key ending in ...H1jK was revoked"}`, `{"message":"the key ending in [redacted] was revoked"}`},
		{"middle run", `{"message":"x LmZ9aBcDeF y"}`, `{"message":"x [redacted] y"}`},
		{"unrelated text unchanged", `{"error":{"type":"overloaded_error","message":"Overloaded"}}`, `{"error":{"type":"overloaded_error","message":"Overloaded"}}`},
		{"short overlap unchanged", `{"message":"sk-pro is a prefix"}`, `{"message":"sk-pro is a prefix"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(RedactKeys([]byte(tc.in), keys)); got != tc.want {
				t.Fatalf("RedactKeys(%s) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

// FuzzRedactKeys: no run of keyFragment bytes of a key survives, and a
// JSON body stays JSON.
func FuzzRedactKeys(f *testing.F) {
	const key = "sk-proj-Q7xv2LmZ9aBcDeFgH1jK"
	for _, s := range []string{`{"message":"Incorrect API key provided: sk-proj-****H1jK."}`, key, "sk-proj-Q7xv2LmZ9aBc" + key,
		`{"error":{"message":"` + key[3:20] + `"}}`, "***", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := string(RedactKeys([]byte(in), []string{key}))
		for i := 0; i+keyFragment <= len(key); i++ {
			if strings.Contains(out, key[i:i+keyFragment]) {
				t.Fatalf("%q survives in %q", key[i:i+keyFragment], out)
			}
		}
		if json.Valid([]byte(in)) && !json.Valid([]byte(out)) {
			t.Fatalf("valid JSON %q redacted to invalid %q", in, out)
		}
	})
}

// FuzzCheckTurnBody: a body the check accepts has no member twice and
// every decision member of its JSON type.
func FuzzCheckTurnBody(f *testing.F) {
	for _, s := range []string{`{"model":"m","stream":true,"max_tokens":10}`, `{"stream":"true"}`, `{"stream":1,"stream":true}`,
		`{"str\u0065am":true,"stream":false}`, `{"max_output_tokens":1e3}`, `{"background":true}`, `{"model":null}`, `{}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		body := []byte(in)
		if !gjson.ValidBytes(body) || !gjson.ParseBytes(body).IsObject() {
			return // the request reader refuses it first
		}
		if CheckTurnBody(streaming.APIResponses, body, false) != nil {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(body, &m); err != nil {
			return // gjson and encoding/json differ on some invalid UTF-8
		}
		if s, ok := m["stream"]; ok && string(s) != "true" && string(s) != "false" && string(s) != "null" {
			t.Fatalf("accepted stream %s", s)
		}
		if b, ok := m["background"]; ok && string(b) == "true" {
			t.Fatal("accepted a background response")
		}
	})
}

// A compressed error body is decoded, then redacted; one that cannot be
// read whole once decoded (past maxErrorBody, malformed, or in a coding
// gatekeeper does not decode) is replaced.
func TestRedactErrorBodyCodings(t *testing.T) {
	const key = "sk-proj-Q7xv2LmZ9aBcDeFgH1jK"
	body := []byte(`{"error":{"message":"Incorrect API key provided: ` + key + `"}}`)
	unreadable := func(status int) []byte {
		return []byte(`{"error":{"message":"unreadable ` + strconv.Itoa(status) + `"}}`)
	}
	bomb := bytes.Repeat([]byte("a"), maxErrorBody+1)
	type tc struct {
		name, coding string
		raw          []byte
		want         string
	}
	var cases []tc
	for _, c := range mockprovider.Codings {
		z, err := mockprovider.Compress(c, body)
		if err != nil {
			t.Fatal(err)
		}
		big, err := mockprovider.Compress(c, bomb)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases,
			tc{c, c, z, `{"error":{"message":"Incorrect API key provided: [redacted]"}}`},
			tc{c + " past the bound decoded", c, big, `{"error":{"message":"unreadable 401"}}`},
			tc{c + " cut", c, z[:len(z)/2], `{"error":{"message":"unreadable 401"}}`})
	}
	cases = append(cases, tc{"identity", "identity", body, `{"error":{"message":"Incorrect API key provided: [redacted]"}}`},
		tc{"unknown", "foo", body, `{"error":{"message":"unreadable 401"}}`},
		tc{"stacked", "gzip, br", body, `{"error":{"message":"unreadable 401"}}`})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: 401, Header: http.Header{"Content-Encoding": {c.coding}, "Content-Length": {strconv.Itoa(len(c.raw))}},
				Body: io.NopCloser(bytes.NewReader(c.raw))}
			RedactErrorBody(resp, []string{key}, unreadable)
			got, _ := io.ReadAll(resp.Body)
			if string(got) != c.want || resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("Content-Length") != strconv.Itoa(len(got)) {
				t.Fatalf("body %.120s, headers %v", got, resp.Header)
			}
		})
	}
}
