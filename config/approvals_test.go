package config

import (
	"strings"
	"testing"
	"time"
)

const gatesDoc = validDoc + `gates:
  - name: destructive-shell
    when: 'tool.name == "Bash"'
    tenants: [team-a]
    approvers: {roles: [secops, sre], quorum: 2, distinct_roles: true}
  - name: deploy
    when: 'tool.name == "Deploy"'
    approvers: {roles: ["approver:release"]}
approvals:
  slack:
    bot_token: xoxb-1
    signing_secret: s3cret
    channel: C1
    users: [{slack_id: U1, name: carol, roles: [secops]}]
  webhook:
    url: https://chat.example.com/hook
    secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
`

func gatesConfig(t *testing.T) *Config {
	t.Helper()
	c, err := Parse([]byte(gatesDoc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("the base config is not valid: %v", err)
	}
	return c
}

func TestApprovalDefaults(t *testing.T) {
	c := gatesConfig(t)
	g := c.Gates[1]
	if g.Expiry.Std() != 15*time.Minute || g.OnRefusal != OnRefusalContinue || g.Approvers.Quorum != 1 {
		t.Errorf("gate defaults: %+v", g)
	}
	a := c.Approvals
	if a.Keepalive.Std() != 15*time.Second || a.MaxPending != 16 || a.MaxHeldBytes != 8<<20 || a.Slack.APIURL != "https://slack.com/api" {
		t.Errorf("approvals defaults: %+v %+v", a, a.Slack)
	}
}

func TestValidateApprovals(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *Config)
		field  string
		msg    string
	}{
		{"valid", func(c *Config) {}, "", ""},
		{"name empty", func(c *Config) { c.Gates[1].Name = "" }, "gates[1].name", "empty"},
		{"name duplicate", func(c *Config) { c.Gates[1].Name = "destructive-shell" }, "gates[1].name", "duplicate gate name (also gates[0])"},
		{"when empty", func(c *Config) { c.Gates[0].When = " " }, "gates[0].when", "empty"},
		{"unknown tenant", func(c *Config) { c.Gates[0].Tenants = []string{"team-z"} }, "gates[0].tenants[0]", `unknown tenant "team-z"`},
		{"roles required", func(c *Config) { c.Gates[1].Approvers.Roles = nil }, "gates[1].approvers.roles", "at least one role"},
		{"role invalid", func(c *Config) { c.Gates[1].Approvers.Roles = []string{"Sec Ops"} }, "gates[1].approvers.roles[0]", "invalid role"},
		{"role duplicate in two forms", func(c *Config) { c.Gates[1].Approvers.Roles = []string{"release", "approver:release"} }, "gates[1].approvers.roles[1]", "duplicate role"},
		{"quorum negative", func(c *Config) { c.Gates[1].Approvers.Quorum = -1 }, "gates[1].approvers.quorum", "at least 1"},
		{"distinct roles beyond roles", func(c *Config) { c.Gates[0].Approvers.Quorum = 3 }, "gates[0].approvers.quorum", "at most one approver per role"},
		{"quorum beyond roles without distinct", func(c *Config) { c.Gates[0].Approvers.Quorum, c.Gates[0].Approvers.DistinctRoles = 3, false }, "", ""},
		{"on_refusal unknown", func(c *Config) { c.Gates[0].OnRefusal = "retry" }, "gates[0].on_refusal", `unknown value "retry"`},
		{"expiry negative", func(c *Config) { c.Gates[0].Expiry = -1 }, "gates[0].expiry", "must be positive"},
		{"keepalive zero", func(c *Config) { c.Approvals.Keepalive = 0 }, "approvals.keepalive", "must be positive"},
		{"max_pending zero", func(c *Config) { c.Approvals.MaxPending = 0 }, "approvals.max_pending", "at least 1"},
		{"max_held_bytes zero", func(c *Config) { c.Approvals.MaxHeldBytes = 0 }, "approvals.max_held_bytes", "must be positive"},
		{"slack token", func(c *Config) { c.Approvals.Slack.BotToken = "" }, "approvals.slack.bot_token", "required"},
		{"slack secret", func(c *Config) { c.Approvals.Slack.SigningSecret = "" }, "approvals.slack.signing_secret", "required"},
		{"slack channel", func(c *Config) { c.Approvals.Slack.Channel = "" }, "approvals.slack.channel", "required"},
		{"slack api_url", func(c *Config) { c.Approvals.Slack.APIURL = "slack.com/api" }, "approvals.slack.api_url", "absolute"},
		{"slack user roles", func(c *Config) { c.Approvals.Slack.Users[0].Roles = nil }, "approvals.slack.users[0].roles", "at least one role"},
		{"slack user id", func(c *Config) { c.Approvals.Slack.Users[0].SlackID = "" }, "approvals.slack.users[0].slack_id", "empty"},
		{"slack user duplicate", func(c *Config) {
			c.Approvals.Slack.Users = append(c.Approvals.Slack.Users, SlackUser{SlackID: "U1", Name: "dave", Roles: []string{"sre"}})
		}, "approvals.slack.users[1].slack_id", "duplicate"},
		{"gate role operator", func(c *Config) { c.Gates[1].Approvers.Roles = []string{"operator"} }, "gates[1].approvers.roles[0]", "reserved for admin tokens"},
		{"gate role approver", func(c *Config) { c.Gates[1].Approvers.Roles = []string{"release", "approver"} }, "gates[1].approvers.roles[1]", "reserved"},
		{"gate role approver:operator", func(c *Config) { c.Gates[1].Approvers.Roles = []string{"approver:operator"} }, "gates[1].approvers.roles[0]", "reserved"},
		{"slack user role operator", func(c *Config) { c.Approvals.Slack.Users[0].Roles = []string{"operator"} }, "approvals.slack.users[0].roles[0]", "reserved"},
		{"people", withPeople(), "", ""},
		{"person scoped", withPeople(func(p []Person) { p[0].Tenants = []string{"team-a"} }), "", ""},
		{"person scoped to an unknown tenant", withPeople(func(p []Person) { p[0].Tenants = []string{"nobody"} }), "approvals.people[0].tenants[0]", `no tenant is named "nobody"`},
		{"person role reserved", withPeople(func(p []Person) { p[0].Roles = []string{"approver"} }), "approvals.people[0].roles[0]", "reserved"},
		{"person without roles", withPeople(func(p []Person) { p[0].Roles = nil }), "approvals.people[0].roles", "at least one role"},
		{"person name empty", withPeople(func(p []Person) { p[1].Name = "" }), "approvals.people[1].name", "empty"},
		{"person name duplicate", withPeople(func(p []Person) { p[1].Name = "erin" }), "approvals.people[1].name", "duplicate person"},
		{"person without credentials", withPeople(func(p []Person) { p[1].AdminTokens, p[1].SlackID = nil, "" }), "approvals.people[1]", "could never vote"},
		{"person unknown token", withPeople(func(p []Person) { p[0].AdminTokens = []string{"nobody"} }), "approvals.people[0].admin_tokens[0]", `no admin token is named "nobody"`},
		{"token of two people", withPeople(func(p []Person) { p[1].AdminTokens = []string{"erin-laptop"} }), "approvals.people[1].admin_tokens[0]", "already belongs to approvals.people[0]"},
		{"person named like another's token", withPeople(func(p []Person) { p[1].Name = "erin-laptop" }), "approvals.people[1].name", "name of an admin token not listed"},
		{"person named like a Slack user", withPeople(func(p []Person) { p[1].Name = "carol" }), "approvals.people[1].name", "also a name in approvals.slack.users"},
		{"person Slack id duplicate", withPeople(func(p []Person) { p[1].SlackID = "UERIN" }), "approvals.people[1].slack_id", "duplicate Slack user"},
		{"person Slack id also a Slack user", withPeople(func(p []Person) { p[0].SlackID = "U1" }), "approvals.people[0].slack_id", "also in approvals.slack.users"},
		{"webhook url", func(c *Config) { c.Approvals.Webhook.URL = "ftp://x" }, "approvals.webhook.url", "absolute http"},
		{"webhook url empty", func(c *Config) { c.Approvals.Webhook.URL = "" }, "approvals.webhook.url", "required"},
		{"webhook secret prefix", func(c *Config) { c.Approvals.Webhook.Secret = "MfKQ9r8GKYqrTwjU" }, "approvals.webhook.secret", "must start with whsec_"},
		{"webhook secret base64", func(c *Config) { c.Approvals.Webhook.Secret = "whsec_!!!" }, "approvals.webhook.secret", "base64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := gatesConfig(t)
			tt.change(c)
			errs := validationErrors(t, c.Validate())
			if tt.field == "" {
				if len(errs) > 0 {
					t.Fatalf("unexpected problems: %v", errs)
				}
				return
			}
			for _, e := range errs {
				if e.Field == tt.field && strings.Contains(e.Msg, tt.msg) {
					return
				}
			}
			t.Errorf("want %s: ...%s..., got %v", tt.field, tt.msg, errs)
		})
	}
}

// withPeople adds two people, erin (two admin tokens and a Slack user) and
// frank (a Slack user), then applies change to them.
func withPeople(change ...func([]Person)) func(c *Config) {
	return func(c *Config) {
		c.Admin.Tokens = append(c.Admin.Tokens,
			AdminToken{Name: "erin-laptop", Token: "erin-laptop-token-0123456789", Roles: []string{"approver:secops"}},
			AdminToken{Name: "erin-ci", Token: "erin-ci-token-0123456789", Roles: []string{"operator"}})
		c.Approvals.People = []Person{
			{Name: "erin", AdminTokens: []string{"erin-laptop", "erin-ci"}, SlackID: "UERIN", Roles: []string{"secops"}},
			{Name: "frank", SlackID: "UFRANK", Roles: []string{"sre", "approver:release"}},
		}
		for _, f := range change {
			f(c.Approvals.People)
		}
	}
}

func TestApprovalSecretsNeverQuoted(t *testing.T) {
	c := gatesConfig(t)
	c.Approvals.Webhook.Secret = "not-a-whsec-secret-zzzz"
	c.Approvals.Slack.APIURL = "ftp://user:url-secret-yyyy@x"
	err := c.Validate()
	if err == nil {
		t.Fatal("invalid config passed")
	}
	for _, s := range []string{"not-a-whsec-secret-zzzz", "url-secret-yyyy"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("the error quotes a secret: %v", err)
		}
	}
}

func TestUnknownApprovalKeys(t *testing.T) {
	for _, doc := range []string{
		validDoc + "gates: [{name: a, when: 'true', approvers: {roles: [x]}, expiry: 1m, quorum: 2}]\n",
		validDoc + "approvals: {slack: {bot_token: a, signing_secret: b, channel: c, token: d}}\n",
	} {
		if _, err := Parse([]byte(doc), nil); err == nil {
			t.Errorf("an unknown key was accepted:\n%s", doc)
		}
	}
}

func TestRedactedApprovals(t *testing.T) {
	c := gatesConfig(t)
	r := c.Redacted()
	if r.Approvals.Slack.BotToken != Redacted || r.Approvals.Slack.SigningSecret != Redacted || r.Approvals.Webhook.Secret != Redacted {
		t.Errorf("secrets not redacted: %+v %+v", r.Approvals.Slack, r.Approvals.Webhook)
	}
	if r.Approvals.Slack.Channel != "C1" || r.Approvals.Webhook.URL != "https://chat.example.com/hook" || r.Gates[0].When != c.Gates[0].When {
		t.Errorf("non-secret fields changed")
	}
	r.Approvals.Slack.Users[0].Roles[0] = "changed"
	r.Gates[0].Approvers.Roles[0] = "changed"
	if c.Approvals.Slack.BotToken != "xoxb-1" || c.Approvals.Slack.Users[0].Roles[0] != "secops" || c.Gates[0].Approvers.Roles[0] != "secops" {
		t.Errorf("Redacted changed the original")
	}
}
