package config

import (
	"crypto/sha256"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestDurationYAML(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    time.Duration
		wantErr bool
	}{
		{"hours", "2h", 2 * time.Hour, false},
		{"minutes", "10m", 10 * time.Minute, false},
		{"seconds", "90s", 90 * time.Second, false},
		{"compound", "1h30m", 90 * time.Minute, false},
		{"fraction", "1.5h", 90 * time.Minute, false},
		{"integer seconds", "90", 90 * time.Second, false},
		{"quoted integer seconds", `"90"`, 90 * time.Second, false},
		{"zero", "0", 0, false},
		{"negative parses, Validate rejects", "-5m", -5 * time.Minute, false},
		{"null keeps the default", "null", 7 * time.Second, false},
		{"empty keeps the default", "", 7 * time.Second, false},
		{"no unit", "1.5", 0, true},
		{"words", "ten minutes", 0, true},
		{"empty string", `""`, 0, true},
		{"too many seconds", "9223372036854775807", 0, true},
		{"beyond int64", "99999999999999999999", 0, true},
		{"mapping", "{h: 1}", 0, true},
		{"sequence", "[1]", 0, true},
		{"boolean", "true", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got struct {
				D Duration `yaml:"d"`
			}
			got.D = Duration(7 * time.Second)
			err := yaml.Unmarshal([]byte("d: "+tc.value+"\n"), &got)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got %v, want an error", got.D)
				}
				if !strings.Contains(err.Error(), "line 1:") {
					t.Errorf("the error has no line: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.D.Std() != tc.want {
				t.Errorf("got %v, want %v", got.D, tc.want)
			}
		})
	}
}

func TestDurationJSON(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    time.Duration
		wantErr bool
	}{
		{"string", `"2h"`, 2 * time.Hour, false},
		{"string seconds", `"90"`, 90 * time.Second, false},
		{"integer seconds", `90`, 90 * time.Second, false},
		{"null keeps the value", `null`, 7 * time.Second, false},
		{"fraction of seconds", `1.5`, 0, true},
		{"bad string", `"soon"`, 0, true},
		{"overflow", `99999999999`, 0, true},
		{"boolean", `true`, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Duration(7 * time.Second)
			err := json.Unmarshal([]byte(tc.value), &d)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got %v, want an error", d)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Std() != tc.want {
				t.Errorf("got %v, want %v", d, tc.want)
			}
		})
	}
}

func TestDurationRoundTrip(t *testing.T) {
	for _, d := range []Duration{0, Duration(90 * time.Second), Duration(2*time.Hour + 30*time.Minute), Duration(-time.Minute), Duration(1500 * time.Millisecond)} {
		y, err := yaml.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var fromYAML Duration
		if err := yaml.Unmarshal(y, &fromYAML); err != nil || fromYAML != d {
			t.Errorf("YAML %q read back as %v, %v; want %v", y, fromYAML, err, d)
		}
		j, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var fromJSON Duration
		if err := json.Unmarshal(j, &fromJSON); err != nil || fromJSON != d {
			t.Errorf("JSON %s read back as %v, %v; want %v", j, fromJSON, err, d)
		}
	}
	if j, _ := json.Marshal(Duration(2 * time.Hour)); string(j) != `"2h0m0s"` {
		t.Errorf("JSON = %s", j)
	}
}

func TestKeyHashes(t *testing.T) {
	foo := sha256.Sum256([]byte("foo"))
	bar := sha256.Sum256([]byte("bar"))
	tests := []struct {
		name string
		keys []string
		want [][32]byte
	}{
		{"plain key", []string{"bar"}, [][32]byte{bar}},
		{"hashed key", []string{sha256Foo}, [][32]byte{foo}},
		{"both forms", []string{"bar", sha256Foo}, [][32]byte{bar, foo}},
		{"empty key left out", []string{"", "bar"}, [][32]byte{bar}},
		{"malformed hash left out", []string{"sha256:abc", "sha256:" + strings.ToUpper(sha256Foo[7:]), "bar"}, [][32]byte{bar}},
		{"none", nil, [][32]byte{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Tenant{Keys: tc.keys}.KeyHashes()
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %x, want %x", got, tc.want)
			}
		})
	}
	if HashKey("foo") != foo {
		t.Error("HashKey is not the SHA-256 of the key")
	}
}

func TestRedacted(t *testing.T) {
	secrets := map[string]string{
		"ANTHROPIC_API_KEY":    "sk-ant-secret-1111",
		"OPENAI_API_KEY":       "sk-openai-secret-2222",
		"TEAM_A_KEY":           "vk-secret-3333",
		"ALICE_TOKEN":          "admin-secret-4444-xxxx",
		"RELEASE_BOT_TOKEN":    "admin-secret-5555-xxxx",
		"SLACK_BOT_TOKEN":      "xoxb-secret-aaaa",
		"SLACK_SIGNING_SECRET": "slack-secret-bbbb",
		"WEBHOOK_SECRET":       "whsec_c2VjcmV0LWNjY2M=",
	}
	c, err := Load("testdata/full.yaml", env(secrets))
	if err != nil {
		t.Fatal(err)
	}
	c.Store.Kind = StoreRedis
	c.Store.RedisURL = "rediss://gk:redis-secret-6666@127.0.0.1:6380/1?dial_timeout=3s"
	c.Tenants[1].Keys = append(c.Tenants[1].Keys, "plain-secret-7777")
	c.Telemetry.MetricsToken = "metrics-secret-aaaa-bbbb"
	c.Providers[1].BaseURL = "https://user:url-secret-8888@example.test/v1?api_key=query-secret-9999"
	if err := c.Validate(); err == nil {
		t.Fatal("credentials in base_url passed validation")
	}
	before, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}

	r := c.Redacted()
	all := []string{"redis-secret-6666", "plain-secret-7777", "metrics-secret-aaaa-bbbb", "url-secret-8888", "query-secret-9999",
		"sk-backup-default", "not-a-real-key", sha256Foo[7:]}
	for _, s := range secrets {
		all = append(all, s)
	}
	y, err := yaml.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if strings.Contains(string(y), s) {
			t.Errorf("YAML of the redacted config holds %q", s)
		}
		if strings.Contains(string(j), s) {
			t.Errorf("JSON of the redacted config holds %q", s)
		}
	}

	if got := r.Store.RedisURL; got != "rediss://gk:REDACTED@127.0.0.1:6380/1?dial_timeout=3s" {
		t.Errorf("redis_url = %q", got)
	}
	if got := r.Providers[0].Keys[0].Key; got != Redacted {
		t.Errorf("provider key = %q", got)
	}
	if got := r.Tenants[1].Keys; !reflect.DeepEqual(got, []string{Redacted, Redacted}) {
		t.Errorf("virtual keys = %q", got)
	}
	if got := r.Admin.Tokens[1].Token; got != Redacted {
		t.Errorf("admin token = %q", got)
	}
	if got := r.Telemetry.MetricsToken; got != Redacted {
		t.Errorf("metrics token = %q", got)
	}
	// What is not secret is kept, so the log still says what runs.
	if r.Providers[0].BaseURL != "https://api.anthropic.com" || r.Providers[2].BaseURL != "mock" ||
		r.Tenants[0].Name != "team-a" || !reflect.DeepEqual(r.Admin.Tokens[0].Roles, []string{"operator", "approver"}) ||
		r.Prices["gpt-4.1"] != c.Prices["gpt-4.1"] || r.Limits != c.Limits {
		t.Errorf("non-secret fields changed: %+v", r)
	}

	// A deep copy: changing it leaves the original alone.
	r.Providers[0].Keys[0].Name = "changed"
	r.Tenants[0].ReadOnlyTools[0] = "changed"
	r.Admin.Tokens[0].Roles[0] = "changed"
	r.Prices["new"] = Price{}
	after, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Error("Redacted changed the original config")
	}

	// An empty secret stays visibly empty.
	c.Admin.Tokens[0].Token = ""
	if got := c.Redacted().Admin.Tokens[0].Token; got != "" {
		t.Errorf("empty token redacted to %q", got)
	}
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"no credentials", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"password only", "redis://:pw@h:6379", "redis://:REDACTED@h:6379"},
		{"user and password", "redis://u:pw@h", "redis://u:REDACTED@h"},
		{"lone user name", "redis://pw@h", "redis://REDACTED@h"},
		{"unparseable", "redis://:pw@[::1", "REDACTED"},
		{"@ outside userinfo", "redis://h/#:pw@x", "REDACTED"},
		{"secret query", "https://h/p?token=t&x=1", "https://h/p?token=REDACTED&x=1"},
		{"mock", "mock", "mock"},
		{"empty", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := redactURL(tc.in); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
