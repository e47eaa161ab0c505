package config

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

const validDoc = `providers:
  - name: anthropic
    api: anthropic
    base_url: https://api.anthropic.com
    default: true
    keys: [{name: main, key: sk-test-provider, rpm: 10}]
  - name: openai
    api: openai
    base_url: https://api.openai.com/v1/
    keys: [{name: main, key: sk-test-openai}]
prices:
  m: {input: 1}
tenants:
  - name: team-a
    keys: [vk-team-a]
  - name: team-b
    keys: [vk-team-b]
admin:
  tokens: [{name: alice, token: alice-token-0123456789, roles: [operator]}]
`

func validConfig(t *testing.T) *Config {
	t.Helper()
	c, err := Parse([]byte(validDoc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("the base config is not valid: %v", err)
	}
	return c
}

// validationErrors returns the FieldErrors of err, which must be nil or a
// *ValidationError.
func validationErrors(t *testing.T, err error) []FieldError {
	t.Helper()
	if err == nil {
		return nil
	}
	ve, ok := errors.AsType[*ValidationError](err)
	if !ok {
		t.Fatalf("got %T %v, want a *ValidationError", err, err)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Error("errors.Is(err, ErrInvalid) is false")
	}
	return ve.Errors
}

const sha256Foo = "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"

func TestValidateRules(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *Config)
		field  string // "" when the change is valid
		msg    string // a part of the message
	}{
		{"listen empty", func(c *Config) { c.Listen = "" }, "listen", "empty"},
		{"listen without port", func(c *Config) { c.Listen = "127.0.0.1" }, "listen", "must be host:port"},
		{"listen port out of range", func(c *Config) { c.Listen = "127.0.0.1:70000" }, "listen", "port must be a number"},
		{"listen port not a number", func(c *Config) { c.Listen = "127.0.0.1:http" }, "listen", "port must be a number"},
		{"listen on all interfaces", func(c *Config) { c.Listen = ":8080" }, "", ""},
		{"listen on an ephemeral port", func(c *Config) { c.Listen = "127.0.0.1:0" }, "", ""},
		{"tls cert without key", func(c *Config) { c.TLS.CertFile = "cert.pem" }, "tls.key_file", "needs both"},
		{"tls key without cert", func(c *Config) { c.TLS.KeyFile = "key.pem" }, "tls.cert_file", "needs both"},
		{"tls both", func(c *Config) { c.TLS = TLS{CertFile: "cert.pem", KeyFile: "key.pem"} }, "", ""},

		{"store kind unknown", func(c *Config) { c.Store.Kind = "etcd" }, "store.kind", `unknown kind "etcd"`},
		{"store kind empty", func(c *Config) { c.Store.Kind = "" }, "store.kind", "empty"},
		{"redis without url", func(c *Config) { c.Store.Kind = "redis" }, "store.redis_url", "required when store.kind is redis"},
		{"redis url not a url", func(c *Config) { c.Store.Kind, c.Store.RedisURL = "redis", "redis://:pw@[::1" }, "store.redis_url", "not a valid URL"},
		{"redis url wrong scheme", func(c *Config) { c.Store.Kind, c.Store.RedisURL = "redis", "http://127.0.0.1:6379" }, "store.redis_url", "scheme must be"},
		{"redis url no host", func(c *Config) { c.Store.Kind, c.Store.RedisURL = "redis", "redis:///0" }, "store.redis_url", "no host"},
		{"redis url bad port", func(c *Config) { c.Store.Kind, c.Store.RedisURL = "redis", "redis://h:0/0" }, "store.redis_url", "port must be"},
		{"redis url bad database", func(c *Config) { c.Store.Kind, c.Store.RedisURL = "redis", "redis://h:6379/zero" }, "store.redis_url", "database number"},
		{"redis url with password and tls", func(c *Config) { c.Store.Kind, c.Store.RedisURL = "redis", "rediss://user:pw@h:6380/2" }, "", ""},
		{"redis cluster", func(c *Config) {
			c.Store.Kind, c.Store.RedisURL, c.Store.RedisCluster = "redis", "rediss://:pw@h1:7000?addr=h2:7001&addr=h3:7002", true
		}, "", ""},
		{"redis cluster database", func(c *Config) {
			c.Store.Kind, c.Store.RedisURL, c.Store.RedisCluster = "redis", "redis://h1:7000/1", true
		}, "store.redis_url", "only database 0"},
		{"redis cluster bad addr", func(c *Config) {
			c.Store.Kind, c.Store.RedisURL, c.Store.RedisCluster = "redis", "redis://h1:7000?addr=h2", true
		}, "store.redis_url", "addr= parameter must be host:port"},
		{"redis cluster without redis", func(c *Config) { c.Store.RedisCluster = true }, "store.redis_cluster", "only with store.kind redis"},
		{"retention zero", func(c *Config) { c.Store.Retention = 0 }, "store.retention", "must be positive"},
		{"idle retention zero", func(c *Config) { c.Store.IdleRetention = 0 }, "store.idle_retention", "must be positive"},
		{"max children zero", func(c *Config) { c.Limits.MaxChildren = 0 }, "limits.max_children", "must be positive"},
		{"max pending connections negative", func(c *Config) { c.Limits.MaxPendingConnections = -1 }, "limits.max_pending_connections", "must be >= 0"},
		{"max pending connections set", func(c *Config) { c.Limits.MaxPendingConnections = 64 }, "", ""},

		{"no providers", func(c *Config) { c.Providers = nil }, "providers", "at least one provider"},
		{"provider name empty", func(c *Config) { c.Providers[1].Name = "" }, "providers[1].name", "empty"},
		{"provider name not path safe", func(c *Config) { c.Providers[1].Name = "Open AI" }, "providers[1].name", "must match [a-z0-9-]+"},
		{"provider name reserved t", func(c *Config) { c.Providers[1].Name = "t" }, "providers[1].name", `"t" is reserved`},
		{"provider name reserved v1", func(c *Config) { c.Providers[1].Name = "v1" }, "providers[1].name", `"v1" is reserved`},
		{"provider name reserved admin", func(c *Config) { c.Providers[1].Name = "admin" }, "providers[1].name", `"admin" is reserved`},
		{"provider name reserved oauth", func(c *Config) { c.Providers[1].Name = "oauth" }, "providers[1].name", `"oauth" is reserved`},
		{"provider name reserved healthz", func(c *Config) { c.Providers[1].Name = "healthz" }, "providers[1].name", `"healthz" is reserved`},
		{"provider name reserved readyz", func(c *Config) { c.Providers[1].Name = "readyz" }, "providers[1].name", `"readyz" is reserved`},
		{"provider name reserved metrics", func(c *Config) { c.Providers[1].Name = "metrics" }, "providers[1].name", `"metrics" is reserved`},
		{"provider name duplicate", func(c *Config) { c.Providers[1].Name = "anthropic" }, "providers[1].name", "duplicate provider name (also providers[0])"},
		{"provider api empty", func(c *Config) { c.Providers[1].API = "" }, "providers[1].api", "empty"},
		{"provider api unknown", func(c *Config) { c.Providers[1].API = "bedrock" }, "providers[1].api", `unknown API "bedrock"`},
		{"base_url empty", func(c *Config) { c.Providers[1].BaseURL = "" }, "providers[1].base_url", "empty"},
		{"base_url relative", func(c *Config) { c.Providers[1].BaseURL = "/v1" }, "providers[1].base_url", "absolute http:// or https://"},
		{"base_url other scheme", func(c *Config) { c.Providers[1].BaseURL = "ftp://example.test" }, "providers[1].base_url", "absolute http:// or https://"},
		{"base_url without host", func(c *Config) { c.Providers[1].BaseURL = "https:///v1" }, "providers[1].base_url", "no host"},
		{"base_url with query", func(c *Config) { c.Providers[1].BaseURL = "https://example.test/v1?x=1" }, "providers[1].base_url", "query"},
		{"base_url with empty query", func(c *Config) { c.Providers[1].BaseURL = "https://example.test/v1?" }, "providers[1].base_url", "query"},
		{"base_url with fragment", func(c *Config) { c.Providers[1].BaseURL = "https://example.test/#x" }, "providers[1].base_url", "fragment"},
		{"base_url with credentials", func(c *Config) { c.Providers[1].BaseURL = "https://u:p@example.test" }, "providers[1].base_url", "credentials"},
		{"base_url not a url", func(c *Config) { c.Providers[1].BaseURL = "https://exa mple.test" }, "providers[1].base_url", "not a valid URL"},
		{"base_url mock", func(c *Config) { c.Providers[1].BaseURL = "mock" }, "", ""},
		{"base_url plain http with path", func(c *Config) { c.Providers[1].BaseURL = "http://127.0.0.1:9090/openai" }, "", ""},
		{"two defaults", func(c *Config) { c.Providers[1].Default = true }, "providers[1].default", "only one provider may be the default (providers[0] already is)"},
		{"no default is fine", func(c *Config) { c.Providers[0].Default = false }, "", ""},
		{"provider without keys", func(c *Config) { c.Providers[1].Keys = nil }, "providers[1].keys", "at least one key"},
		{"provider without keys, one tenant forwarding", func(c *Config) {
			c.Providers[1].Keys = nil
			c.Tenants[0].Credentials = CredentialsForward
		}, "providers[1].keys", "at least one key"},
		{"provider without keys, every tenant forwarding", func(c *Config) {
			c.Providers[1].Keys = nil
			for i := range c.Tenants {
				c.Tenants[i].Credentials = CredentialsForward
			}
		}, "", ""},
		{"key name empty", func(c *Config) { c.Providers[0].Keys[0].Name = "" }, "providers[0].keys[0].name", "empty"},
		{"key name duplicate", func(c *Config) {
			c.Providers[0].Keys = append(c.Providers[0].Keys, ProviderKey{Name: "main", Key: "sk-2"})
		}, "providers[0].keys[1].name", "duplicate key name (also providers[0].keys[0])"},
		{"key name reused in another provider", func(c *Config) { c.Providers[1].Keys[0].Name = "main" }, "", ""},
		{"key empty", func(c *Config) { c.Providers[0].Keys[0].Key = "" }, "providers[0].keys[0].key", "empty"},
		{"rpm negative", func(c *Config) { c.Providers[0].Keys[0].RPM = -1 }, "providers[0].keys[0].rpm", ">= 0"},
		{"rpm burst", func(c *Config) { c.Providers[0].Keys[0].RPMBurst = 3 }, "", ""},
		{"rpm burst a whole minute", func(c *Config) { c.Providers[0].Keys[0].RPMBurst = 10 }, "", ""},
		{"rpm burst above the limit", func(c *Config) { c.Providers[0].Keys[0].RPMBurst = 11 }, "providers[0].keys[0].rpm_burst", "more than rpm 10"},
		{"rpm burst negative", func(c *Config) { c.Providers[0].Keys[0].RPMBurst = -1 }, "providers[0].keys[0].rpm_burst", ">= 0"},
		{"input burst without a limit", func(c *Config) { c.Providers[0].Keys[0].InputTPMBurst = 100 }, "providers[0].keys[0].input_tpm_burst", "without input_tpm"},
		{"output burst", func(c *Config) { c.Providers[0].Keys[0].OutputTPM, c.Providers[0].Keys[0].OutputTPMBurst = 60000, 8000 }, "", ""},
		{"input_tpm negative", func(c *Config) { c.Providers[0].Keys[0].InputTPM = -1 }, "providers[0].keys[0].input_tpm", ">= 0"},
		{"output_tpm negative", func(c *Config) { c.Providers[0].Keys[0].OutputTPM = -1 }, "providers[0].keys[0].output_tpm", ">= 0"},

		{"price negative", func(c *Config) { c.Prices["m"] = Price{Output: -0.5} }, `prices["m"].output`, "finite number >= 0"},
		{"price not a number", func(c *Config) { c.Prices["m"] = Price{CachedInput: math.NaN()} }, `prices["m"].cached_input`, "finite number >= 0"},
		{"price infinite", func(c *Config) { c.Prices["m"] = Price{CacheWrite: math.Inf(1)} }, `prices["m"].cache_write`, "finite number >= 0"},
		{"price input negative", func(c *Config) { c.Prices["m"] = Price{Input: -1} }, `prices["m"].input`, "finite number >= 0"},
		{"price model empty", func(c *Config) { c.Prices[" "] = Price{} }, `prices[" "]`, "empty model name"},

		{"tenant name empty", func(c *Config) { c.Tenants[1].Name = "" }, "tenants[1].name", "empty"},
		{"tenant name duplicate", func(c *Config) { c.Tenants[1].Name = "team-a" }, "tenants[1].name", "duplicate tenant name (also tenants[0])"},
		{"tenant without keys", func(c *Config) { c.Tenants[1].Keys = nil }, "tenants[1].keys", "at least one virtual key"},
		{"tenant key empty", func(c *Config) { c.Tenants[1].Keys = []string{""} }, "tenants[1].keys[0]", "empty"},
		{"identity valid", func(c *Config) { c.Identity = testIdentity() }, "", ""},
		{"gateway valid", func(c *Config) {
			c.Identity = testIdentity()
			c.Identity.Gateway = Gateway{Enabled: true, PublicURL: "https://gk.example.com", Settings: []GroupSettings{{Group: "eng", Settings: map[string]any{"model": "x"}}}}
		}, "", ""},
		{"gateway without issuer", func(c *Config) { c.Identity.Gateway.Enabled = true }, "identity.issuer", "required when"},
		{"gateway public url over http", func(c *Config) {
			c.Identity = testIdentity()
			c.Identity.Gateway = Gateway{Enabled: true, PublicURL: "http://gk.example.com"}
		}, "identity.gateway.public_url", "must be https"},
		{"gateway public url with a path", func(c *Config) {
			c.Identity = testIdentity()
			c.Identity.Gateway = Gateway{Enabled: true, PublicURL: "https://gk.example.com/anthropic"}
		}, "identity.gateway.public_url", "without path"},
		{"gateway settings group twice", func(c *Config) {
			c.Identity = testIdentity()
			c.Identity.Gateway = Gateway{Enabled: true, Settings: []GroupSettings{{Group: "eng"}, {Group: "eng"}}}
		}, "identity.gateway.settings[1].group", `duplicate group "eng"`},
		{"tenant reached only through identity", func(c *Config) { c.Identity = testIdentity(); c.Tenants[1].Keys = nil }, "", ""},
		{"identity without issuer", func(c *Config) { c.Identity = testIdentity(); c.Identity.Issuer = "" }, "identity.issuer", "required when"},
		{"identity issuer over http", func(c *Config) { c.Identity = testIdentity(); c.Identity.Issuer = "http://idp.example.com" }, "identity.issuer", "must be https"},
		{"identity issuer on loopback over http", func(c *Config) { c.Identity = testIdentity(); c.Identity.Issuer = "http://127.0.0.1:9000" }, "", ""},
		{"identity issuer relative", func(c *Config) { c.Identity = testIdentity(); c.Identity.Issuer = "/idp" }, "identity.issuer", "absolute URL"},
		{"identity without client", func(c *Config) { c.Identity = testIdentity(); c.Identity.ClientID = "" }, "identity.client_id", "required"},
		{"identity without groups", func(c *Config) { c.Identity = testIdentity(); c.Identity.Groups = nil }, "identity.groups", "at least one group"},
		{"identity group to no tenant", func(c *Config) { c.Identity = testIdentity(); c.Identity.Groups[0].Tenant = "nobody" }, "identity.groups[0].tenant", `no tenant named "nobody"`},
		{"console sign-in valid", func(c *Config) { c.Identity = testConsole() }, "", ""},
		{"console on loopback over http", func(c *Config) {
			c.Identity = testConsole()
			c.Identity.Console.RedirectURL = "http://127.0.0.1:8080/console/callback"
		}, "", ""},
		{"console without client", func(c *Config) { c.Identity = testConsole(); c.Identity.Console.ClientID = "" }, "identity.console.client_id", "required"},
		{"console redirect over http", func(c *Config) {
			c.Identity = testConsole()
			c.Identity.Console.RedirectURL = "http://gk.example.com/console/callback"
		}, "identity.console.redirect_url", "must be https"},
		{"console redirect elsewhere", func(c *Config) {
			c.Identity = testConsole()
			c.Identity.Console.RedirectURL = "https://gk.example.com/callback"
		}, "identity.console.redirect_url", "must end with /console/callback"},
		{"console session too long", func(c *Config) {
			c.Identity = testConsole()
			c.Identity.Console.SessionLifetime = Duration(30 * 24 * time.Hour)
		}, "identity.console.session_lifetime", "between 1m and 168h"},
		{"console without admin groups", func(c *Config) { c.Identity = testConsole(); c.Identity.AdminGroups = nil }, "identity.admin_groups", "at least one group"},
		{"admin groups without console", func(c *Config) { c.Identity = testConsole(); c.Identity.Console = nil }, "identity.console", "required when identity.admin_groups"},
		{"admin group bad role", func(c *Config) { c.Identity = testConsole(); c.Identity.AdminGroups[0].Roles = []string{"root"} }, "identity.admin_groups[0].roles[0]", "unknown role"},
		{"admin group no tenant", func(c *Config) { c.Identity = testConsole(); c.Identity.AdminGroups[0].Tenants = []string{"nobody"} }, "identity.admin_groups[0].tenants[0]", "no tenant is named"},
		{"admin group duplicate", func(c *Config) {
			c.Identity = testConsole()
			c.Identity.AdminGroups = append(c.Identity.AdminGroups, c.Identity.AdminGroups[0])
		}, "identity.admin_groups[1].group", "duplicate group"},
		{"person by subject", func(c *Config) {
			c.Approvals.People = []Person{{Name: "carol", Subject: "u-1", Roles: []string{"secops"}}}
		}, "", ""},
		{"person by duplicate email", func(c *Config) {
			c.Approvals.People = []Person{{Name: "carol", Email: "c@x.com", Roles: []string{"secops"}}, {Name: "cara", Email: "C@X.com", Roles: []string{"secops"}}}
		}, "approvals.people[1].email", "duplicate person"},
		{"person with no credential", func(c *Config) {
			c.Approvals.People = []Person{{Name: "carol", Roles: []string{"secops"}}}
		}, "approvals.people[0]", "none of admin_tokens, slack_id, subject or email"},
		{"identity group twice", func(c *Config) {
			c.Identity = testIdentity()
			c.Identity.Groups = append(c.Identity.Groups, GroupTenant{Group: "eng", Tenant: "team-a"})
		}, "identity.groups[1].group", `duplicate group "eng"`},
		{"identity groups claim empty", func(c *Config) { c.Identity = testIdentity(); c.Identity.GroupsClaim = "" }, "identity.groups_claim", "empty"},
		{"person limits valid", func(c *Config) {
			c.Identity = testIdentity()
			c.Identity.Limits = []PersonLimit{{Scope: LimitScope{Default: true}, Dollars: 5, Period: PeriodDaily},
				{Scope: LimitScope{Group: "eng"}, Dollars: 50, Period: PeriodWeekly}, {Scope: LimitScope{Person: "u1"}, Tenant: "team-b", Dollars: 9, Period: PeriodMonthly}}
			c.Identity.Models = []GroupModels{{Group: "eng", Allow: []string{"claude-*"}}}
		}, "", ""},
		{"person limit without issuer", func(c *Config) {
			c.Identity = Identity{Limits: []PersonLimit{{Scope: LimitScope{Default: true}, Dollars: 5, Period: PeriodDaily}}}
		}, "identity.issuer", "required when"},
		{"person limit with two scopes", func(c *Config) {
			c.Identity = testIdentity()
			c.Identity.Limits = []PersonLimit{{Scope: LimitScope{Group: "eng", Default: true}, Dollars: 5, Period: PeriodDaily}}
		}, "identity.limits[0].scope", "exactly one"},
		{"person limit without scope", func(c *Config) {
			c.Identity = testIdentity()
			c.Identity.Limits = []PersonLimit{{Dollars: 5, Period: PeriodDaily}}
		}, "identity.limits[0].scope", "exactly one"},
		{"person limit of nothing", func(c *Config) {
			c.Identity = testIdentity()
			c.Identity.Limits = []PersonLimit{{Scope: LimitScope{Default: true}, Period: PeriodDaily}}
		}, "identity.limits[0].dollars", "more than 0"},
		{"person limit period unknown", func(c *Config) {
			c.Identity = testIdentity()
			c.Identity.Limits = []PersonLimit{{Scope: LimitScope{Default: true}, Dollars: 1, Period: "hourly"}}
		}, "identity.limits[0].period", `unknown period "hourly"`},
		{"person limit tenant unknown", func(c *Config) {
			c.Identity = testIdentity()
			c.Identity.Limits = []PersonLimit{{Scope: LimitScope{Default: true}, Tenant: "nobody", Dollars: 1, Period: PeriodDaily}}
		}, "identity.limits[0].tenant", `no tenant named "nobody"`},
		{"person limit twice", func(c *Config) {
			c.Identity = testIdentity()
			c.Identity.Limits = []PersonLimit{{Scope: LimitScope{Group: "eng"}, Dollars: 1, Period: PeriodDaily}, {Scope: LimitScope{Group: "eng"}, Dollars: 2, Period: PeriodDaily}}
		}, "identity.limits[1].scope", "same scope"},
		{"group models empty", func(c *Config) {
			c.Identity = testIdentity()
			c.Identity.Models = []GroupModels{{Group: "eng"}}
		}, "identity.models[0].allow", "at least one model"},
		{"group models twice", func(c *Config) {
			c.Identity = testIdentity()
			c.Identity.Models = []GroupModels{{Group: "eng", Allow: []string{"a"}}, {Group: "eng", Allow: []string{"b"}}}
		}, "identity.models[1].group", "duplicate group"},

		{"sha256 key valid", func(c *Config) { c.Tenants[1].Keys = []string{sha256Foo} }, "", ""},
		{"sha256 key uppercase", func(c *Config) { c.Tenants[1].Keys = []string{strings.ToUpper(sha256Foo[7:])} }, "", ""},
		{"sha256 key uppercase hex", func(c *Config) { c.Tenants[1].Keys = []string{"sha256:" + strings.ToUpper(sha256Foo[7:])} }, "tenants[1].keys[0]", "64 lowercase hex"},
		{"sha256 key short", func(c *Config) { c.Tenants[1].Keys = []string{sha256Foo[:70]} }, "tenants[1].keys[0]", "64 lowercase hex"},
		{"sha256 key not hex", func(c *Config) { c.Tenants[1].Keys = []string{sha256Foo[:70] + "zz"} }, "tenants[1].keys[0]", "64 lowercase hex"},
		{"virtual key twice in one tenant", func(c *Config) { c.Tenants[1].Keys = []string{"vk-team-b", "vk-team-b"} }, "tenants[1].keys[1]", "duplicate virtual key (also tenants[1].keys[0])"},
		{"virtual key in two tenants", func(c *Config) { c.Tenants[1].Keys = []string{"vk-team-a"} }, "tenants[1].keys[0]", `virtual key already used by tenant "team-a" (tenants[0].keys[0])`},
		{"virtual key in two tenants, once hashed", func(c *Config) {
			c.Tenants[0].Keys = []string{"foo"}
			c.Tenants[1].Keys = []string{sha256Foo}
		}, "tenants[1].keys[0]", `virtual key already used by tenant "team-a" (tenants[0].keys[0])`},
		{"priority unknown", func(c *Config) { c.Tenants[0].Priority = "urgent" }, "tenants[0].priority", `unknown priority "urgent"`},
		{"priority empty", func(c *Config) { c.Tenants[0].Priority = "" }, "tenants[0].priority", `unknown priority ""`},
		{"budget turns negative", func(c *Config) { c.Tenants[0].Budget.Turns = -1 }, "tenants[0].budget.turns", ">= 0"},
		{"budget tokens negative", func(c *Config) { c.Tenants[0].Budget.Tokens = -1 }, "tenants[0].budget.tokens", ">= 0"},
		{"budget wall_clock negative", func(c *Config) { c.Tenants[0].Budget.WallClock = -1 }, "tenants[0].budget.wall_clock", "negative"},
		{"budget dollars negative", func(c *Config) { c.Tenants[0].Budget.Dollars = -0.01 }, "tenants[0].budget.dollars", ">= 0"},
		{"tenant name with a brace", func(c *Config) { c.Tenants[1].Name = "team{b}" }, "tenants[1].name", "must not contain {, } or /"},
		{"tenant name with a slash", func(c *Config) { c.Tenants[1].Name = "team/b" }, "tenants[1].name", "must not contain {, } or /"},
		{"tenant dollars per day negative", func(c *Config) { c.Tenants[0].Limits.DollarsPerDay = -1 }, "tenants[0].limits.dollars_per_day", ">= 0"},
		{"tenant dollars per month not finite", func(c *Config) { c.Tenants[0].Limits.DollarsPerMonth = math.Inf(1) }, "tenants[0].limits.dollars_per_month", "finite"},
		{"tenant tokens per day negative", func(c *Config) { c.Tenants[0].Limits.TokensPerDay = -1 }, "tenants[0].limits.tokens_per_day", ">= 0"},
		{"tenant live runs negative", func(c *Config) { c.Tenants[0].Limits.MaxLiveTrajectories = -1 }, "tenants[0].limits.max_live_trajectories", ">= 0"},
		{"tenant new runs negative", func(c *Config) { c.Tenants[0].Limits.NewTrajectoriesPerHour = -1 }, "tenants[0].limits.new_trajectories_per_hour", ">= 0"},
		{"tenant limits", func(c *Config) {
			c.Tenants[0].Limits = TenantLimits{DollarsPerDay: 5, DollarsPerMonth: 50, TokensPerDay: 1e6, MaxLiveTrajectories: 10, NewTrajectoriesPerHour: 100}
		}, "", ""},
		{"trajectories unknown", func(c *Config) { c.Tenants[0].Trajectories = "anyone" }, "tenants[0].trajectories", `unknown value "anyone"`},
		{"trajectories operators", func(c *Config) { c.Tenants[0].Trajectories = TrajectoriesOperators }, "", ""},
		{"credentials unknown", func(c *Config) { c.Tenants[0].Credentials = "own" }, "tenants[0].credentials", `unknown value "own"`},
		{"credentials forward", func(c *Config) { c.Tenants[0].Credentials = CredentialsForward }, "", ""},
		{"max_output_tokens negative", func(c *Config) { c.Tenants[0].CallLimits.MaxOutputTokens = -1 }, "tenants[0].call_limits.max_output_tokens", ">= 0"},
		{"call_deadline negative", func(c *Config) { c.Tenants[0].CallLimits.CallDeadline = -1 }, "tenants[0].call_limits.call_deadline", "negative"},
		{"read-only tool empty", func(c *Config) { c.Tenants[0].ReadOnlyTools = []string{"Read", ""} }, "tenants[0].read_only_tools[1]", "empty"},
		{"anthropic beta listed", func(c *Config) { c.Tenants[0].AnthropicBeta = []string{"prompt-caching-2024-07-31"} }, "", ""},
		{"anthropic beta with a comma", func(c *Config) { c.Tenants[0].AnthropicBeta = []string{"a,b"} }, "tenants[0].anthropic_beta[0]", "one beta name"},
		{"passthrough allowed", func(c *Config) { c.Providers[1].Passthrough = []Passthrough{{Method: "GET", Path: "/v1/files/*"}} }, "", ""},
		{"passthrough lowercase method", func(c *Config) { c.Providers[1].Passthrough = []Passthrough{{Method: "get", Path: "/v1/files"}} }, "providers[1].passthrough[0].method", "unknown method"},
		{"passthrough relative path", func(c *Config) { c.Providers[1].Passthrough = []Passthrough{{Method: "GET", Path: "v1/files"}} }, "providers[1].passthrough[0].path", "must start with /"},
		{"passthrough trailing slash", func(c *Config) { c.Providers[1].Passthrough = []Passthrough{{Method: "GET", Path: "/v1/files/"}} }, "providers[1].passthrough[0].path", "trailing slash"},
		{"passthrough dot segment", func(c *Config) { c.Providers[1].Passthrough = []Passthrough{{Method: "GET", Path: "/v1/../files"}} }, "providers[1].passthrough[0].path", "dot segments"},
		{"passthrough escaped slash", func(c *Config) { c.Providers[1].Passthrough = []Passthrough{{Method: "GET", Path: "/v1/a%2fb"}} }, "providers[1].passthrough[0].path", "escaped /"},
		{"passthrough bad pattern", func(c *Config) { c.Providers[1].Passthrough = []Passthrough{{Method: "GET", Path: "/v1/[a"}} }, "providers[1].passthrough[0].path", "not a valid pattern"},
		{"body timeout zero", func(c *Config) { c.Limits.BodyTimeout = 0 }, "limits.body_timeout", "must be positive"},
		{"header timeout zero", func(c *Config) { c.Limits.HeaderTimeout = 0 }, "limits.header_timeout", "must be positive"},
		{"idle timeout negative", func(c *Config) { c.Limits.IdleTimeout = Duration(-time.Second) }, "limits.idle_timeout", "must be positive"},
		{"no tenants is fine", func(c *Config) { c.Tenants = nil }, "", ""},

		{"admin name empty", func(c *Config) { c.Admin.Tokens[0].Name = "" }, "admin.tokens[0].name", "empty"},
		{"admin name duplicate", func(c *Config) {
			c.Admin.Tokens = append(c.Admin.Tokens, AdminToken{Name: "alice", Token: "another-token-0123456789", Roles: []string{"approver"}})
		}, "admin.tokens[1].name", "duplicate token name (also admin.tokens[0])"},
		{"admin token empty", func(c *Config) { c.Admin.Tokens[0].Token = "" }, "admin.tokens[0].token", "empty"},
		{"admin token short", func(c *Config) { c.Admin.Tokens[0].Token = "fifteen-chars-x" }, "admin.tokens[0].token", "at least 16 characters"},
		{"admin token sixteen characters", func(c *Config) { c.Admin.Tokens[0].Token = "sixteen-chars-xy" }, "", ""},
		{"admin token scoped", func(c *Config) { c.Admin.Tokens[0].Tenants = []string{"team-b", "team-a"} }, "", ""},
		{"admin token scoped to no tenant", func(c *Config) { c.Admin.Tokens[0].Tenants = []string{} }, "admin.tokens[0].tenants", "leave it out"},
		{"admin token scoped to an unknown tenant", func(c *Config) { c.Admin.Tokens[0].Tenants = []string{"team-a", "team-c"} }, "admin.tokens[0].tenants[1]", `no tenant is named "team-c"`},
		{"admin token scoped twice", func(c *Config) { c.Admin.Tokens[0].Tenants = []string{"team-a", "team-a"} }, "admin.tokens[0].tenants[1]", "duplicate tenant"},
		{"admin token duplicate", func(c *Config) {
			c.Admin.Tokens = append(c.Admin.Tokens, AdminToken{Name: "bob", Token: "alice-token-0123456789", Roles: []string{"approver"}})
		}, "admin.tokens[1].token", "same token as admin.tokens[0]"},
		{"admin token is a virtual key", func(c *Config) { c.Tenants[1].Keys = []string{"alice-token-0123456789"} }, "admin.tokens[0].token", "same as a virtual key (tenants[1].keys[0])"},
		{"admin token without roles", func(c *Config) { c.Admin.Tokens[0].Roles = nil }, "admin.tokens[0].roles", "at least one role"},
		{"admin role unknown", func(c *Config) { c.Admin.Tokens[0].Roles = []string{"root"} }, "admin.tokens[0].roles[0]", `unknown role "root"`},
		{"admin approver group uppercase", func(c *Config) { c.Admin.Tokens[0].Roles = []string{"approver:Release"} }, "admin.tokens[0].roles[0]", "unknown role"},
		{"admin approver group empty", func(c *Config) { c.Admin.Tokens[0].Roles = []string{"approver:"} }, "admin.tokens[0].roles[0]", "unknown role"},
		{"admin approver group", func(c *Config) { c.Admin.Tokens[0].Roles = []string{"operator", "approver", "approver:sre-oncall"} }, "", ""},
		{"admin role duplicate", func(c *Config) { c.Admin.Tokens[0].Roles = []string{"operator", "operator"} }, "admin.tokens[0].roles[1]", "duplicate role"},
		{"no admin tokens is fine", func(c *Config) { c.Admin.Tokens = nil }, "", ""},

		{"max_body_bytes zero", func(c *Config) { c.Limits.MaxBodyBytes = 0 }, "limits.max_body_bytes", "must be positive"},
		{"max_event_bytes negative", func(c *Config) { c.Limits.MaxEventBytes = -1 }, "limits.max_event_bytes", "must be positive"},
		{"halt above one", func(c *Config) { c.Stages.Halt = 1.5 }, "budget_stages.halt", "want a value in (0, 1]"},
		{"stages out of order", func(c *Config) { c.Stages.Steer = 0.95 }, "budget_stages", "want steer < restrict < halt"},
		{"min output tokens zero", func(c *Config) { c.BudgetMinOutputTokens = 0 }, "budget_min_output_tokens", "must be positive"},
		{"unknown exhaustion policy", func(c *Config) { c.Tenants[0].Budget.OnExhaust = "stop" }, "tenants[0].budget.on_exhaust", "want fail or pause"},
		{"pause on exhaustion", func(c *Config) { c.Tenants[0].Budget.OnExhaust = "pause" }, "", ""},
		{"tool_deadline zero", func(c *Config) { c.Limits.ToolDeadline = 0 }, "limits.tool_deadline", "must be positive"},
		{"idle_finish negative", func(c *Config) { c.Limits.IdleFinish = -1 }, "limits.idle_finish", "negative"},
		{"log level unknown", func(c *Config) { c.Log.Level = "verbose" }, "log.level", `unknown level "verbose"`},
		{"log format unknown", func(c *Config) { c.Log.Format = "xml" }, "log.format", `unknown format "xml"`},

		{"telemetry service name empty", func(c *Config) { c.Telemetry.ServiceName = " " }, "telemetry.service_name", "empty"},
		{"metrics token", func(c *Config) { c.Telemetry.MetricsToken = "metrics-token-0123456789" }, "", ""},
		{"metrics token short", func(c *Config) { c.Telemetry.MetricsToken = "short-token" }, "telemetry.metrics_token", "too short"},
		{"metrics token is a virtual key", func(c *Config) {
			c.Tenants[0].Keys = []string{"vk-team-a-long-enough"}
			c.Telemetry.MetricsToken = "vk-team-a-long-enough"
		}, "telemetry.metrics_token", "same as a virtual key (tenants[0].keys[0])"},
		{"sample ratio negative", func(c *Config) { c.Telemetry.Traces.SampleRatio = -0.1 }, "telemetry.traces.sample_ratio", "want a value in [0, 1]"},
		{"sample ratio above one", func(c *Config) { c.Telemetry.Traces.SampleRatio = 1.5 }, "telemetry.traces.sample_ratio", "want a value in [0, 1]"},
		{"sample ratio NaN", func(c *Config) { c.Telemetry.Traces.SampleRatio = math.NaN() }, "telemetry.traces.sample_ratio", "want a value in [0, 1]"},
		{"metrics people negative", func(c *Config) { c.Telemetry.MetricsPeople = -1 }, "telemetry.metrics_people", "want 0 (no person label) to 10000"},
		{"metrics people too many", func(c *Config) { c.Telemetry.MetricsPeople = 10001 }, "telemetry.metrics_people", "want 0 (no person label) to 10000"},
		{"metrics people off", func(c *Config) { c.Telemetry.MetricsPeople = 0 }, "", ""},
		{"sample ratio zero", func(c *Config) { c.Telemetry.Traces.SampleRatio = 0 }, "", ""},
		{"otlp endpoint not http", func(c *Config) { c.Telemetry.Traces.OTLPEndpoint = "grpc://collector:4317" }, "telemetry.traces.otlp_endpoint", "must be an absolute http"},
		{"otlp endpoint no host", func(c *Config) { c.Telemetry.Traces.OTLPEndpoint = "http:///v1/traces" }, "telemetry.traces.otlp_endpoint", "no host"},
		{"otlp endpoint not a url", func(c *Config) { c.Telemetry.Traces.OTLPEndpoint = "http://[::1" }, "telemetry.traces.otlp_endpoint", "not a valid URL"},
		{"max_wait zero", func(c *Config) { c.RateLimits.MaxWait = 0 }, "rate_limits.max_wait", "want a duration in (0s, 10m0s]"},
		{"max_wait negative", func(c *Config) { c.RateLimits.MaxWait = -1 }, "rate_limits.max_wait", "want a duration in"},
		{"max_wait past ten minutes", func(c *Config) { c.RateLimits.MaxWait = Duration(11 * time.Minute) }, "rate_limits.max_wait", "want a duration in"},
		{"max_wait ten minutes", func(c *Config) { c.RateLimits.MaxWait = Duration(10 * time.Minute) }, "", ""},
		{"weight zero", func(c *Config) { c.RateLimits.Weights["batch"] = 0 }, `rate_limits.weights["batch"]`, "want a weight >= 1"},
		{"weight negative", func(c *Config) { c.RateLimits.Weights["interactive"] = -4 }, `rate_limits.weights["interactive"]`, "want a weight >= 1"},
		{"weight of an unknown class", func(c *Config) { c.RateLimits.Weights["urgent"] = 8 }, `rate_limits.weights["urgent"]`, `unknown class "urgent"`},
		{"weights changed", func(c *Config) { c.RateLimits.Weights = map[string]int{"interactive": 10, "standard": 3, "batch": 1} }, "", ""},
		{"default output tokens zero", func(c *Config) { c.RateLimits.DefaultOutputTokens = 0 }, "rate_limits.default_output_tokens", "must be positive"},
		{"traces on with an endpoint", func(c *Config) {
			c.Telemetry.Traces = Traces{Enabled: true, OTLPEndpoint: "https://collector.example:4318/v1/traces", SampleRatio: 0.25}
		}, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig(t)
			tc.change(c)
			got := validationErrors(t, c.Validate())
			if tc.field == "" {
				if got != nil {
					t.Fatalf("want valid, got %v", got)
				}
				return
			}
			if len(got) != 1 || got[0].Field != tc.field || !strings.Contains(got[0].Msg, tc.msg) {
				t.Fatalf("got %v, want one problem at %s containing %q", got, tc.field, tc.msg)
			}
		})
	}
}

func TestValidateListsEveryProblem(t *testing.T) {
	doc := `listen: localhost
store: {kind: redis}
providers:
  - name: Admin
    api: bedrock
    base_url: api.example.test
    default: true
    keys: [{name: k, key: "${PROVIDER_KEY}", rpm: -5}]
  - name: b
    api: openai
    base_url: https://example.test?x=1
    default: true
tenants:
  - name: a
    keys: ["${TEAM_A_KEY}", shared]
  - name: a
    keys: [shared]
    priority: urgent
admin:
  tokens:
    - {name: root, token: short, roles: [superuser]}
log: {level: loud}
`
	c, err := Parse([]byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	want := []FieldError{
		{"listen", "must be host:port, e.g. 127.0.0.1:8080"},
		{"store.redis_url", "required when store.kind is redis"},
		{"providers[0].name", `"Admin" must match [a-z0-9-]+ (it is a URL path prefix)`},
		{"providers[0].api", `unknown API "bedrock" (want anthropic, openai or gemini)`},
		{"providers[0].base_url", "must be an absolute http:// or https:// URL, or mock"},
		{"providers[0].keys[0].key", "empty (PROVIDER_KEY is not set)"},
		{"providers[0].keys[0].rpm", "must be >= 0"},
		{"providers[1].base_url", "must not have a query"},
		{"providers[1].default", "only one provider may be the default (providers[0] already is)"},
		{"providers[1].keys", "at least one key is required (none only when every tenant has credentials: forward)"},
		{"tenants[0].keys[0]", "empty (TEAM_A_KEY is not set)"},
		{"tenants[1].name", "duplicate tenant name (also tenants[0])"},
		{"tenants[1].keys[0]", `virtual key already used by tenant "a" (tenants[0].keys[1]); each key must identify one tenant`},
		{"tenants[1].priority", `unknown priority "urgent" (want interactive, standard or batch)`},
		{"admin.tokens[0].token", "too short: at least 16 characters"},
		{"admin.tokens[0].roles[0]", `unknown role "superuser" (want operator, approver or approver:<group>, lowercase)`},
		{"log.level", `unknown level "loud" (want debug, info, warn or error)`},
	}
	got := validationErrors(t, err)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %d problems:\n%v\nwant %d", len(got), err, len(want))
		for i := range max(len(got), len(want)) {
			var g, w FieldError
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Errorf("[%d] got %v\n     want %v", i, g, w)
			}
		}
	}
	if lines := strings.Split(err.Error(), "\n"); len(lines) != len(want) || lines[0] != "listen: must be host:port, e.g. 127.0.0.1:8080" {
		t.Errorf("Error() is not one problem per line:\n%v", err)
	}
}

// TestValidateNeverQuotesEnvValues: a secret put into a field whose value
// is quoted in messages is named by its variable instead.
func TestValidateNeverQuotesEnvValues(t *testing.T) {
	const secret = "sk-live-secret-value"
	doc := `store: {kind: "${S}"}
providers:
  - {name: "${S}", api: "${S}", base_url: "${S}", keys: [{name: k, key: "${S}"}]}
tenants:
  - {name: t, keys: ["${S}"], priority: "${S}"}
  - {name: u, keys: ["${S}"]}
admin:
  tokens: [{name: a, token: "${S}", roles: ["${S}"]}]
log: {level: "${S}", format: "${S}"}
`
	c, err := Parse([]byte(doc), env(map[string]string{"S": secret}))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	if err == nil {
		t.Fatal("no problems found")
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("a message quotes the secret:\n%v", err)
	}
	if !strings.Contains(err.Error(), `log.level: unknown level the value of ${S}`) {
		t.Errorf("the variable is not named:\n%v", err)
	}
}

func testConsole() Identity {
	id := testIdentity()
	id.Console = &ConsoleSignIn{ClientID: "gatekeeper-console", RedirectURL: "https://gk.example.com/console/callback", SessionLifetime: Duration(DefaultSessionLifetime)}
	id.AdminGroups = []AdminGroup{{Group: "secops", Roles: []string{"approver:secops"}, Tenants: []string{"team-b"}}}
	return id
}

func testIdentity() Identity {
	return Identity{Issuer: "https://idp.example.com", ClientID: "gatekeeper", GroupsClaim: DefaultGroupsClaim,
		Groups: []GroupTenant{{Group: "eng", Tenant: "team-b"}}}
}
