package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// env is a fixed environment for tests.
func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

var fullEnv = map[string]string{
	"ANTHROPIC_API_KEY":    "sk-ant-test-0001",
	"OPENAI_API_KEY":       "sk-openai-test-0002",
	"TEAM_A_KEY":           "vk-team-a-0003",
	"ALICE_TOKEN":          "alice-admin-token-0004",
	"RELEASE_BOT_TOKEN":    "release-bot-token-0005",
	"SLACK_BOT_TOKEN":      "xoxb-test-0006",
	"SLACK_SIGNING_SECRET": "slack-signing-0007",
	"WEBHOOK_SECRET":       "whsec_c2VjcmV0LTAwMDg=",
}

func TestLoadFullExample(t *testing.T) {
	c, err := Load(filepath.Join("testdata", "full.yaml"), env(fullEnv))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	enabled := true
	want := &Config{
		Listen: "127.0.0.1:8080",
		Store: Store{Kind: "memory", RedisURL: "redis://127.0.0.1:6379/0", Retention: Duration(72 * time.Hour), IdleRetention: Duration(12 * time.Hour),
			Timeout: Duration(3 * time.Second), Heartbeat: Duration(10 * time.Second), SettleWindow: Duration(DefaultSettleWindow)},
		ShutdownGrace: Duration(45 * time.Second),
		Providers: []Provider{
			{Name: "anthropic", API: "anthropic", BaseURL: "https://api.anthropic.com", Default: true,
				Keys: []ProviderKey{{Name: "main", Key: "sk-ant-test-0001", RPM: 4000, InputTPM: 2000000, OutputTPM: 400000}}},
			{Name: "openai", API: "openai", BaseURL: "https://api.openai.com",
				Keys: []ProviderKey{{Name: "main", Key: "sk-openai-test-0002", RPM: 500, Organization: "org-eu", Project: "proj_agents"},
					{Name: "backup", Key: "sk-backup-default"}},
				Passthrough: []Passthrough{{Method: "GET", Path: "/v1/files/*"}}},
			{Name: "mock", API: "anthropic", BaseURL: "mock",
				Keys: []ProviderKey{{Name: "offline", Key: "not-a-real-key"}}},
		},
		Prices: map[string]Price{
			"claude-sonnet-4-5": {Input: 3, CachedInput: 0.3, CacheWrite: 3.75, CacheWrite1h: 6, Output: 15},
			"gpt-4.1":           {Input: 2, CachedInput: 0.5, Output: 8},
		},
		Tenants: []Tenant{
			{Name: "team-a", Keys: []string{"vk-team-a-0003"}, Priority: "interactive",
				Budget:        Budget{Turns: 200, Tokens: 5000000, WallClock: Duration(2 * time.Hour), Dollars: 20, OnExhaust: "pause"},
				CallLimits:    CallLimits{MaxOutputTokens: 32000, CallDeadline: Duration(10 * time.Minute)},
				ReadOnlyTools: []string{"Read", "Glob", "Grep", "LS"}, MaxTruncations: 5, RefuseUngatedMCP: true,
				Limits:       TenantLimits{DollarsPerDay: 50, DollarsPerMonth: 600, TokensPerDay: 20000000, MaxLiveTrajectories: 20, NewTrajectoriesPerHour: 60},
				Trajectories: TrajectoriesOperators, Credentials: CredentialsPool,
				Watchdog: &Watchdog{Enabled: &enabled, OnLoop: OnLoopFail}},
			{Name: "nightly", Keys: []string{"sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"},
				Priority: "standard", Budget: Budget{Turns: 50, WallClock: Duration(90 * time.Minute)},
				AnthropicBeta: []string{"prompt-caching-2024-07-31"}, MaxTruncations: DefaultMaxTruncations, Trajectories: TrajectoriesAgents, Credentials: CredentialsPool,
				Limits: TenantLimits{MaxLiveTrajectories: DefaultMaxLiveTrajectories, NewTrajectoriesPerHour: DefaultNewTrajectoriesPerHour}},
		},
		Admin: Admin{Tokens: []AdminToken{
			{Name: "alice", Token: "alice-admin-token-0004", Roles: []string{"operator", "approver"}},
			{Name: "release-bot", Token: "release-bot-token-0005", Roles: []string{"approver:release"}},
		}},
		Limits: Limits{MaxBodyBytes: 16 << 20, MaxEventBytes: 8 << 20, ToolDeadline: Duration(45 * time.Minute), IdleFinish: Duration(2 * time.Hour), PauseHold: Duration(DefaultPauseHold),
			BodyTimeout: Duration(30 * time.Second), HeaderTimeout: Duration(20 * time.Second), IdleTimeout: Duration(2 * time.Minute),
			MaxChildren: 200},
		Stages:                Stages{Steer: 0.6, Restrict: 0.85, Halt: 1.0},
		BudgetMinOutputTokens: 2048,
		Log:                   Log{Level: "debug", Format: "text"},
		Telemetry: Telemetry{ServiceName: "gatekeeper-eu",
			Traces: Traces{Enabled: true, OTLPEndpoint: "http://127.0.0.1:4318/v1/traces", SampleRatio: 0.5}, MetricsPeople: 250},
		Gates: []Gate{
			{Name: "destructive-shell", When: `tool.name == "Bash" && tool.input.command.matches("rm -rf|DROP TABLE|kubectl delete")`,
				Tenants:   []string{"team-a"},
				Approvers: Approvers{Roles: []string{"secops", "sre"}, Quorum: 2, DistinctRoles: true},
				Expiry:    Duration(15 * time.Minute), OnRefusal: "continue"},
			{Name: "release", When: `tool.name == "Deploy"`,
				Approvers: Approvers{Roles: []string{"approver:release"}, Quorum: 1},
				Expiry:    Duration(DefaultGateExpiry), OnRefusal: "end_turn"},
		},
		Approvals: Approvals{Keepalive: Duration(10 * time.Second), MaxPending: 8, MaxHeldBytes: 4 << 20,
			Slack: &Slack{BotToken: "xoxb-test-0006", SigningSecret: "slack-signing-0007", Channel: "C0123456789",
				APIURL: DefaultSlackAPIURL, Users: []SlackUser{{SlackID: "U012AB3CD", Name: "carol", Roles: []string{"secops"}}}},
			Webhook: &Webhook{URL: "https://chat.example.com/hooks/gatekeeper", Secret: "whsec_c2VjcmV0LTAwMDg="}},
		RateLimits: RateLimits{MaxWait: Duration(45 * time.Second), DefaultOutputTokens: 8192,
			Weights: map[string]int{"interactive": 4, "standard": 2, "batch": 2}},
		Watchdog: Watchdog{RepeatedCalls: 6, CallWindow: 10, RepeatedResults: DefaultRepeatedResults,
			ErrorResults: DefaultErrorResults, IdleTurns: -1, OnLoop: OnLoopPause},
		Identity: Identity{GroupsClaim: DefaultGroupsClaim},
	}
	gotEnv := c.env
	c.env = nil
	if !reflect.DeepEqual(c, want) {
		t.Errorf("config mismatch\n got %+v\nwant %+v", c, want)
	}
	wantVars := map[string][]string{
		"providers[0].keys[0].key":       {"ANTHROPIC_API_KEY"},
		"providers[1].keys[0].key":       {"OPENAI_API_KEY"},
		"providers[1].keys[1].key":       {"OPENAI_BACKUP_KEY"},
		"tenants[0].keys[0]":             {"TEAM_A_KEY"},
		"admin.tokens[0].token":          {"ALICE_TOKEN"},
		"admin.tokens[1].token":          {"RELEASE_BOT_TOKEN"},
		"approvals.slack.bot_token":      {"SLACK_BOT_TOKEN"},
		"approvals.slack.signing_secret": {"SLACK_SIGNING_SECRET"},
		"approvals.webhook.secret":       {"WEBHOOK_SECRET"},
	}
	if len(gotEnv) != len(wantVars) {
		t.Errorf("recorded %d expanded fields, want %d: %v", len(gotEnv), len(wantVars), gotEnv)
	}
	for field, vars := range wantVars {
		if src := gotEnv[field]; !reflect.DeepEqual(src.vars, vars) || len(src.unset) != 0 {
			t.Errorf("%s: recorded %+v, want vars %v and none unset", field, src, vars)
		}
	}

	c.env = gotEnv
	p, ok := c.Provider("openai")
	if !ok || p.API != "openai" || p != &c.Providers[1] {
		t.Errorf("Provider(openai) = %v, %v", p, ok)
	}
	if _, ok := c.Provider("nope"); ok {
		t.Error("Provider(nope) found a provider")
	}
	if d, ok := c.DefaultProvider(); !ok || d.Name != "anthropic" {
		t.Errorf("DefaultProvider() = %v, %v", d, ok)
	}
	if m, _ := c.Provider("mock"); !m.Mock() || c.Providers[0].Mock() {
		t.Error("Mock() does not tell the mock provider")
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte("tenants: [{name: a, keys: [k]}]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Tenants = []Tenant{{Name: "a", Keys: []string{"k"}, Priority: PriorityStandard, MaxTruncations: DefaultMaxTruncations, Trajectories: TrajectoriesAgents, Credentials: CredentialsPool,
		Limits: TenantLimits{MaxLiveTrajectories: DefaultMaxLiveTrajectories, NewTrajectoriesPerHour: DefaultNewTrajectoriesPerHour}}}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got %+v\nwant %+v", c, want)
	}
	if c.Listen != "127.0.0.1:8080" || c.Store.Kind != "memory" || c.Store.Retention.Std() != 168*time.Hour ||
		c.Limits.MaxBodyBytes != 32<<20 || c.Limits.MaxEventBytes != 16<<20 ||
		c.Limits.ToolDeadline.Std() != 30*time.Minute || c.Limits.IdleFinish != 0 ||
		c.Log.Level != "info" || c.Log.Format != "json" ||
		c.Telemetry.ServiceName != "gatekeeper" || c.Telemetry.Traces.Enabled || c.Telemetry.Traces.SampleRatio != 1 ||
		c.RateLimits.MaxWait.Std() != 30*time.Second || c.RateLimits.DefaultOutputTokens != 4096 ||
		!reflect.DeepEqual(c.RateLimits.Weights, map[string]int{"interactive": 4, "standard": 2, "batch": 1}) {
		t.Errorf("defaults are not the documented ones: %+v", c)
	}
	if _, ok := c.DefaultProvider(); ok {
		t.Error("a config without providers has a default provider")
	}

	empty, err := Parse(nil, nil)
	if err != nil {
		t.Fatalf("empty file: %v", err)
	}
	if !reflect.DeepEqual(empty, DefaultConfig()) {
		t.Errorf("empty file: got %+v, want the defaults", empty)
	}
}

// oneKey is a config whose only provider key and tenant key are templates.
func oneKey(providerKey, tenantKey string) string {
	return `providers:
  - name: p
    api: openai
    base_url: https://example.test
    keys:
      - name: k
        key: ` + providerKey + `
tenants:
  - name: t
    keys:
      - ` + tenantKey + `
`
}

func TestEnvExpansion(t *testing.T) {
	vars := map[string]string{"A": "alpha", "B": "beta", "EMPTY": "", "DOLLAR": "x$y"}
	tests := []struct {
		name, value, want string
	}{
		{"plain reference", `"${A}"`, "alpha"},
		{"unquoted reference", `${A}`, "alpha"},
		{"inside text", `"pre-${A}-post"`, "pre-alpha-post"},
		{"two references", `"${A}${B}"`, "alphabeta"},
		{"default when unset", `"${UNSET:-fallback}"`, "fallback"},
		{"default when empty", `"${EMPTY:-fallback}"`, "fallback"},
		{"default ignored when set", `"${A:-fallback}"`, "alpha"},
		{"default with colon and dash", `"${UNSET:-a:-b}"`, "a:-b"},
		{"empty default", `"${UNSET:-}"`, ""},
		{"double dollar is a dollar", `"pa$$word"`, "pa$word"},
		{"escaped reference stays literal", `"$${A}"`, "${A}"},
		{"lone dollar kept", `"cost $5"`, "cost $5"},
		{"dollar name without braces kept", `"$A"`, "$A"},
		{"trailing dollar kept", `"abc$"`, "abc$"},
		{"value is not expanded again", `"${DOLLAR}"`, "x$y"},
		{"single quoted", `'${B}'`, "beta"},
		{"block scalar", "|-\n        ${A}", "alpha"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(oneKey("static", tc.value)), env(vars))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Tenants[0].Keys[0]; got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEnvExpansionTypedFields(t *testing.T) {
	vars := map[string]string{"RPM": "4000", "TPM": "0x10", "WALL": "90m", "SECS": "120", "DEF": "true", "PRICE": "2.5"}
	doc := `providers:
  - name: p
    api: openai
    base_url: https://example.test
    default: ${DEF}
    keys:
      - name: k
        key: sk
        rpm: ${RPM}
        input_tpm: "${TPM}"
        output_tpm: ${UNSET_TPM:-7}
prices:
  m: {input: "${PRICE}"}
tenants:
  - name: t
    keys: [vk]
    budget:
      wall_clock: ${WALL}
    call_limits: {call_deadline: '${SECS}'}
`
	c, err := Parse([]byte(doc), env(vars))
	if err != nil {
		t.Fatal(err)
	}
	k := c.Providers[0].Keys[0]
	if k.RPM != 4000 || k.InputTPM != 16 || k.OutputTPM != 7 {
		t.Errorf("key limits = %+v", k)
	}
	if !c.Providers[0].Default {
		t.Error("default: ${DEF} with DEF=true did not decode to true")
	}
	if c.Prices["m"].Input != 2.5 {
		t.Errorf("price = %v", c.Prices["m"].Input)
	}
	if c.Tenants[0].Budget.WallClock.Std() != 90*time.Minute || c.Tenants[0].CallLimits.CallDeadline.Std() != 2*time.Minute {
		t.Errorf("durations = %v, %v", c.Tenants[0].Budget.WallClock, c.Tenants[0].CallLimits.CallDeadline)
	}
}

func TestMalformedReference(t *testing.T) {
	tests := []struct{ name, value string }{
		{"unterminated", `"${A"`},
		{"empty name", `"${}"`},
		{"name starts with digit", `"${1A}"`},
		{"shell assign form", `"${A:=x}"`},
		{"shell dash form", `"${A-x}"`},
		{"space in name", `"${A B}"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(oneKey("static", tc.value)), nil)
			pe, ok := errors.AsType[*ParseError](err)
			if !ok {
				t.Fatalf("got %v, want a *ParseError", err)
			}
			if len(pe.Problems) != 1 || pe.Problems[0].Line != 11 ||
				!strings.Contains(pe.Problems[0].Msg, "tenants[0].keys[0]: malformed ${...} reference") {
				t.Errorf("problems = %+v", pe.Problems)
			}
		})
	}
}

func TestUnsetVariableNamed(t *testing.T) {
	tests := []struct {
		name  string
		doc   string
		field string
		msg   string
	}{
		{"tenant key", oneKey("sk", `"${TEAM_A_KEY}"`), "tenants[0].keys[0]", "empty (TEAM_A_KEY is not set)"},
		{"provider key", oneKey(`"${ANTHROPIC_API_KEY}"`, "vk"), "providers[0].keys[0].key", "empty (ANTHROPIC_API_KEY is not set)"},
		{"two variables", oneKey(`"${P1}${P2}"`, "vk"), "providers[0].keys[0].key", "empty (P1, P2 are not set)"},
		{"part of a value", oneKey("sk", `"vk-${SUFFIX}"`), "tenants[0].keys[0]", "incomplete (SUFFIX is not set)"},
		{"integer field", strings.Replace(oneKey("sk", "vk"), "key: sk", "key: sk\n        rpm: ${RPM}", 1),
			"providers[0].keys[0].rpm", "empty (RPM is not set)"},
		{"field whose own rule also fails", "listen: ${LISTEN}\n" + oneKey("sk", "vk"), "listen", "empty (LISTEN is not set)"},
		{"redis password", "store: {kind: redis, redis_url: 'redis://:${REDIS_PASSWORD}@127.0.0.1:6379/0'}\n" + oneKey("sk", "vk"),
			"store.redis_url", "incomplete (REDIS_PASSWORD is not set)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.doc), nil)
			if err != nil {
				t.Fatal(err)
			}
			want := []FieldError{{Field: tc.field, Msg: tc.msg}}
			if got := validationErrors(t, c.Validate()); !reflect.DeepEqual(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}

	t.Run("optional with empty default", func(t *testing.T) {
		c, err := Parse([]byte("store: {redis_url: '${REDIS_URL:-}'}\n"+oneKey("sk", "vk")), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("${REDIS_URL:-} made the field required: %v", err)
		}
	})
}

// TestEnvValueCannotInject: a value that reads as YAML must stay one plain
// string in the field that referred to it.
func TestEnvValueCannotInject(t *testing.T) {
	values := []struct{ name, value string }{
		{"new mapping key", "x\nproviders: []\ntenants: []"},
		{"flow mapping", "{name: evil, keys: [a]}"},
		{"flow sequence", "[a, b, c]"},
		{"alias", "*anchor"},
		{"anchor", "&anchor v"},
		{"tag", "!!int 5"},
		{"document marker", "---\nlisten: 0.0.0.0:1"},
		{"null word", "null"},
		{"tilde", "~"},
		{"boolean word", "true"},
		{"number", "0123"},
		{"quotes", `"quoted" 'single'`},
		{"reference", "${OTHER}"},
		{"comment", "# nothing"},
	}
	for _, tc := range values {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]string{"INJECT": tc.value, "OTHER": "other-value"}
			c, err := Parse([]byte(oneKey(`"${INJECT}"`, "${INJECT}")), env(vars))
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Providers) != 1 || len(c.Tenants) != 1 || len(c.Tenants[0].Keys) != 1 || c.Listen != DefaultListen {
				t.Fatalf("the structure changed: %+v", c)
			}
			if got := c.Providers[0].Keys[0].Key; got != tc.value {
				t.Errorf("provider key = %q, want %q", got, tc.value)
			}
			if got := c.Tenants[0].Keys[0]; got != tc.value {
				t.Errorf("tenant key = %q, want %q", got, tc.value)
			}
		})
	}
}

// TestEnvValueOfWrongType: a value that does not fit a typed field is
// reported without being quoted (it may be a secret in the wrong field).
func TestEnvValueOfWrongType(t *testing.T) {
	const secret = "sk-live-0123456789abcdef"
	tests := []struct {
		name, field, value, msg string
	}{
		{"integer", "rpm", "4000\nfoo: bar", "providers[0].keys[0].rpm: the value of ${V} is not a valid integer"},
		{"secret in integer", "rpm", secret, "providers[0].keys[0].rpm: the value of ${V} is not a valid integer"},
		{"boolean", "default", secret, "providers[0].default: the value of ${V} is not a valid boolean"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(oneKey("sk", "vk"), "key: sk", "key: sk\n        rpm: 1", 1)
			if tc.field == "default" {
				doc = strings.Replace(doc, "api: openai", "api: openai\n    default: ${V}", 1)
			} else {
				doc = strings.Replace(doc, "rpm: 1", "rpm: ${V}", 1)
			}
			_, err := Parse([]byte(doc), env(map[string]string{"V": tc.value}))
			pe, ok := errors.AsType[*ParseError](err)
			if !ok {
				t.Fatalf("got %v, want a *ParseError", err)
			}
			if len(pe.Problems) != 1 || pe.Problems[0].Msg != tc.msg {
				t.Errorf("problems = %+v, want one: %s", pe.Problems, tc.msg)
			}
			if strings.Contains(err.Error(), tc.value[:5]) || strings.Contains(err.Error(), "foo") {
				t.Errorf("the error quotes the value: %v", err)
			}
		})
	}

	t.Run("duration", func(t *testing.T) {
		doc := oneKey("sk", "vk") + "    budget: {wall_clock: '${W}'}\n"
		_, err := Parse([]byte(doc), env(map[string]string{"W": secret}))
		if err == nil || strings.Contains(err.Error(), "sk-live") ||
			!strings.Contains(err.Error(), "tenants[0].budget.wall_clock: the value of ${W} is not a valid duration") {
			t.Errorf("got %v", err)
		}
	})
}

func TestAliasExpandedOnce(t *testing.T) {
	doc := `providers:
  - name: p
    api: openai
    base_url: https://example.test
    keys:
      - {name: a, key: &k "$${A}-${B}"}
      - {name: b, key: *k}
`
	c, err := Parse([]byte(doc), env(map[string]string{"A": "no", "B": "beta"}))
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range c.Providers[0].Keys {
		if k.Key != "${A}-beta" {
			t.Errorf("keys[%d] = %q, want %q", i, k.Key, "${A}-beta")
		}
	}
}

func TestParseProblems(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []Problem
	}{
		{
			name: "unknown top-level key",
			doc:  "lisen: 127.0.0.1:1\n",
			want: []Problem{{1, `unknown field "lisen"`}},
		},
		{
			name: "unknown keys at every depth, all listed",
			doc: `listen: 127.0.0.1:8080
providers:
  - name: p
    bse_url: https://example.test
    keys: [{name: k, key: sk, rpn: 5}]
tenants:
  - name: t
    budget: {turn: 3}
admin: {token: []}
prices: {m: {inptu: 1}}
rate_limits: {max_wiat: 5s}
`,
			want: []Problem{
				{4, `unknown field "bse_url" in providers[0]`},
				{5, `unknown field "rpn" in providers[0].keys[0]`},
				{8, `unknown field "turn" in tenants[0].budget`},
				{9, `unknown field "token" in admin`},
				{10, `unknown field "inptu" in prices["m"]`},
				{11, `unknown field "max_wiat" in rate_limits`},
			},
		},
		{
			name: "unknown key through a merge",
			doc:  "base: &b {name: p, colour: red}\n",
			want: []Problem{{1, `unknown field "base"`}},
		},
		{
			name: "merged mapping is checked too",
			doc:  "providers:\n  - &p {name: p, api: openai}\n  - {<<: *p, nme: q}\n",
			want: []Problem{{3, `unknown field "nme" in providers[1]`}},
		},
		{
			name: "wrong type",
			doc:  "providers: [{name: p, keys: [{rpm: lots}]}]\n",
			want: []Problem{{1, "cannot unmarshal !!str `lots` into int"}},
		},
		{
			name: "weight of the wrong type",
			doc:  "rate_limits: {weights: {batch: heavy}}\n",
			want: []Problem{{1, "cannot unmarshal !!str `heavy` into int"}},
		},
		{
			name: "bad duration",
			doc:  "limits:\n  tool_deadline: 10 minutes\n",
			want: []Problem{{2, `invalid duration: want a duration such as "90s", "10m", "2h" or whole seconds`}},
		},
		{
			name: "syntax error",
			doc:  "listen: [\n",
			want: []Problem{{1, "did not find expected node content"}},
		},
		{
			name: "duplicate key",
			doc:  "listen: a:1\nlisten: b:2\n",
			want: []Problem{{2, `mapping key "listen" already defined at line 1`}},
		},
		{
			name: "second document",
			doc:  "listen: a:1\n---\nlisten: b:2\n",
			want: []Problem{{2, "a config file holds one YAML document; found a second"}},
		},
		{
			name: "not a mapping",
			doc:  "- a\n- b\n",
			want: []Problem{{1, "cannot unmarshal !!seq into config.Config"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.doc), nil)
			if c != nil {
				t.Error("a config came back with an error")
			}
			pe, ok := errors.AsType[*ParseError](err)
			if !ok {
				t.Fatalf("got %v, want a *ParseError", err)
			}
			if !reflect.DeepEqual(pe.Problems, tc.want) {
				t.Errorf("problems:\n got %+v\nwant %+v", pe.Problems, tc.want)
			}
			if !errors.Is(err, ErrParse) {
				t.Error("errors.Is(err, ErrParse) is false")
			}
		})
	}
}

func TestLoadNamesFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte("listen: x:1\nlog: {levl: info}\nstore: {knd: redis}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path, nil)
	want := path + `:2: unknown field "levl" in log` + "\n" + path + `:3: unknown field "knd" in store`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}

	_, err = Load(filepath.Join(dir, "missing.yaml"), nil)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: got %v, want fs.ErrNotExist", err)
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte("listen: nowhere\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Check(path, nil)
	if c == nil || !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v, %v; want the config and an ErrInvalid", c, err)
	}
	want := "listen: must be host:port, e.g. 127.0.0.1:8080\nproviders: at least one provider is required"
	if err.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}

	c, err = Check(filepath.Join("testdata", "full.yaml"), env(fullEnv))
	if err != nil || c == nil {
		t.Errorf("full example: %v", err)
	}
}

func TestAliasesAreBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("prices:\n  a0: &a0 {input: 1}\ntenants:\n")
	for i := 1; i < 40; i++ {
		fmt.Fprintf(&b, "  - &a%d {<<: [*a%d, *a%d], name: x}\n", i, i-1, i-1)
	}
	_, err := Parse([]byte(b.String()), nil)
	pe, ok := errors.AsType[*ParseError](err)
	if !ok {
		t.Fatalf("got %v, want a *ParseError", err)
	}
	if len(pe.Problems) > maxProblems+1 || !strings.Contains(err.Error(), "excessive aliasing") {
		t.Errorf("%d problems:\n%v", len(pe.Problems), err)
	}
}

// A tenant's run limits default to a bound unless written: absent (no
// limits, or limits without the key) is the default, a written 0 none,
// read as the decoder reads the file (anchors, aliases, merge keys).
func TestRunLimitDefaults(t *testing.T) {
	def, defHour := DefaultMaxLiveTrajectories, DefaultNewTrajectoriesPerHour
	for _, c := range []struct {
		name, yaml    string
		live, perHour int
	}{
		{"no limits", "tenants: [{name: a, keys: [k]}]", def, defHour},
		{"empty limits", "tenants: [{name: a, keys: [k], limits: {}}]", def, defHour},
		{"other limits only", "tenants: [{name: a, keys: [k], limits: {dollars_per_day: 5}}]", def, defHour},
		{"written", "tenants: [{name: a, keys: [k], limits: {max_live_trajectories: 7, new_trajectories_per_hour: 9}}]", 7, 9},
		{"written 0: none", "tenants: [{name: a, keys: [k], limits: {max_live_trajectories: 0, new_trajectories_per_hour: 0}}]", 0, 0},
		{"one written", "tenants: [{name: a, keys: [k], limits: {new_trajectories_per_hour: 0}}]", def, 0},
		{"an aliased limits", "tenants: [{name: a, keys: [k], limits: &l {max_live_trajectories: 0}}, {name: b, keys: [k2], limits: *l}]", 0, defHour},
		{"merged limits", "tenants: [{name: a, keys: [k], limits: &l {max_live_trajectories: 0}}, {name: b, keys: [k2], limits: {<<: *l, new_trajectories_per_hour: 3}}]", 0, 3},
		{"merged tenant", "tenants: [&t {name: a, keys: [k], limits: {new_trajectories_per_hour: 0}}, {<<: *t, name: b, keys: [k2]}]", def, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse([]byte(c.yaml), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Tenants[len(cfg.Tenants)-1].Limits; got.MaxLiveTrajectories != c.live || got.NewTrajectoriesPerHour != c.perHour {
				t.Errorf("limits %+v, want max_live_trajectories %d, new_trajectories_per_hour %d", got, c.live, c.perHour)
			}
		})
	}
}
