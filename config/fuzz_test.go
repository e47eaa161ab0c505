package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
)

// fuzzEnv holds values that look like YAML, so expansion is exercised with
// the inputs most likely to confuse it.
var fuzzEnv = env(map[string]string{
	"A":      "alpha",
	"KEY":    "sk-fuzz-secret",
	"YAML":   "x\nlisten: 0.0.0.0:1\n- [",
	"NUM":    "42",
	"DUR":    "90m",
	"DOLLAR": "$${A}",
})

func FuzzParse(f *testing.F) {
	if full, err := os.ReadFile(filepath.Join("testdata", "full.yaml")); err == nil {
		f.Add(full)
	}
	for _, seed := range []string{
		validDoc,
		"",
		"listen: ${A}:${NUM}\n",
		"providers:\n  - name: p\n    keys:\n      - key: ${KEY}\n        rpm: ${NUM}\n        input_tpm: '${YAML}'\n",
		"tenants:\n  - keys: ['${YAML}', \"$${KEY}\", '${KEY:-d}', '${']\n    budget: {wall_clock: '${DUR}', dollars: .nan}\n",
		"a: &a [*a]\n",
		"providers: &p [{name: x, keys: *p}]\n",
		"base: &b {name: p, api: openai}\nproviders: [{<<: *b}, {<<: [*b, *b]}]\n",
		"prices: {? [a]: b, m: {input: -1}}\n",
		"limits: {tool_deadline: 9223372036854775807, idle_finish: -1s}\n",
		"admin: {tokens: [{token: '${KEY}${KEY}', roles: [approver:x, operator, Approver]}]}\n",
		"store: {kind: redis, redis_url: 'redis://:${KEY}@h:1/0'}\n---\nx: 1\n",
		"!!binary aGVsbG8=\n",
		"listen: !!int ${NUM}\n",
		"log: {level: '${DOLLAR}'}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, fuzzEnv)
		if err != nil {
			if _, ok := errors.AsType[*ParseError](err); !ok {
				t.Fatalf("Parse returned %T %v, want a *ParseError", err, err)
			}
			if c != nil {
				t.Fatal("Parse returned a config with an error")
			}
			return
		}
		verr := c.Validate()
		if verr != nil {
			if _, ok := errors.AsType[*ValidationError](verr); !ok {
				t.Fatalf("Validate returned %T %v", verr, verr)
			}
		}
		for _, tn := range c.Tenants {
			n := len(tn.KeyHashes())
			if n > len(tn.Keys) || (verr == nil && n != len(tn.Keys)) {
				t.Fatalf("tenant %q: %d hashes for %d keys (valid: %v)", tn.Name, n, len(tn.Keys), verr == nil)
			}
		}
		if verr == nil {
			defaults := 0
			for _, p := range c.Providers {
				if p.Default {
					defaults++
				}
			}
			if defaults > 1 {
				t.Fatalf("a valid config has %d default providers", defaults)
			}
		}

		r := c.Redacted()
		for _, p := range r.Providers {
			for _, k := range p.Keys {
				if k.Key != "" && k.Key != Redacted {
					t.Fatalf("provider key not redacted: %q", k.Key)
				}
			}
		}
		for _, tn := range r.Tenants {
			for _, k := range tn.Keys {
				if k != "" && k != Redacted {
					t.Fatalf("virtual key not redacted: %q", k)
				}
			}
		}
		for _, tok := range r.Admin.Tokens {
			if tok.Token != "" && tok.Token != Redacted {
				t.Fatalf("admin token not redacted: %q", tok.Token)
			}
		}
		if s := r.Approvals.Slack; s != nil && (s.BotToken != "" && s.BotToken != Redacted || s.SigningSecret != "" && s.SigningSecret != Redacted) {
			t.Fatalf("slack secrets not redacted: %+v", s)
		}
		if w := r.Approvals.Webhook; w != nil && w.Secret != "" && w.Secret != Redacted {
			t.Fatalf("webhook secret not redacted: %q", w.Secret)
		}
		if tok := r.Telemetry.MetricsToken; tok != "" && tok != Redacted {
			t.Fatalf("metrics token not redacted: %q", tok)
		}
		if _, err := yaml.Marshal(r); err != nil {
			t.Fatalf("the redacted config does not marshal: %v", err)
		}
	})
}
