package config

import (
	"encoding/base64"
	"regexp"
	"strings"
)

// approvalRoleRE is a gate's or a Slack user's role: a group name, or the
// same in the admin tokens' form "approver:<group>".
var approvalRoleRE = regexp.MustCompile(`^(approver:)?[a-z0-9][a-z0-9_-]*$`)

// WebhookSecretPrefix starts a Standard Webhooks signing secret.
const WebhookSecretPrefix = "whsec_"

// applyApprovalDefaults fills the defaults of each gate and of the Slack
// channel when there is one.
func (c *Config) applyApprovalDefaults() {
	for i := range c.Gates {
		g := &c.Gates[i]
		if g.Expiry == 0 {
			g.Expiry = Duration(DefaultGateExpiry)
		}
		if g.OnRefusal == "" {
			g.OnRefusal = OnRefusalContinue
		}
		if g.Approvers.Quorum == 0 {
			g.Approvers.Quorum = DefaultGateQuorum
		}
	}
	if s := c.Approvals.Slack; s != nil && s.APIURL == "" {
		s.APIURL = DefaultSlackAPIURL
	}
}

// gates checks every gate but its condition, which approvals.Compile
// checks: config does not know CEL.
func (v *validator) gates(gs []Gate, tenants []Tenant) {
	known := map[string]bool{}
	for _, t := range tenants {
		known[t.Name] = true
	}
	names := map[string]string{}
	for i, g := range gs {
		at := indexPath("gates", i)
		v.unique(names, at, "name", "gate name", g.Name)
		if strings.TrimSpace(g.When) == "" {
			v.add(fieldPath(at, "when"), "empty (want a CEL condition, e.g. tool.name == \"Bash\")")
		}
		for j, t := range g.Tenants {
			if !known[t] {
				v.add(indexPath(fieldPath(at, "tenants"), j), "unknown tenant %s", v.show(indexPath(fieldPath(at, "tenants"), j), t))
			}
		}
		ap := fieldPath(at, "approvers")
		distinct := v.roles(fieldPath(ap, "roles"), g.Approvers.Roles)
		q := g.Approvers.Quorum
		switch {
		case q < 1:
			v.add(fieldPath(ap, "quorum"), "must be at least 1")
		case g.Approvers.DistinctRoles && q > distinct:
			v.add(fieldPath(ap, "quorum"), "is %d, but distinct_roles allows at most one approver per role and there are %d roles", q, distinct)
		}
		if g.Expiry <= 0 {
			v.add(fieldPath(at, "expiry"), "must be positive")
		}
		switch g.OnRefusal {
		case OnRefusalContinue, OnRefusalEndTurn:
		default:
			v.add(fieldPath(at, "on_refusal"), "unknown value %s (want continue or end_turn)", v.show(fieldPath(at, "on_refusal"), g.OnRefusal))
		}
	}
}

// unique checks field key of the item at: not blank, and not the value of
// an earlier item. seen maps each value to the item that had it first.
func (v *validator) unique(seen map[string]string, at, key, what, value string) {
	switch {
	case strings.TrimSpace(value) == "":
		v.add(fieldPath(at, key), "empty")
	case seen[value] != "":
		v.add(fieldPath(at, key), "duplicate %s (also %s)", what, seen[value])
	default:
		seen[value] = at
	}
}

// roles checks a list of approval roles and returns how many distinct
// roles it names.
func (v *validator) roles(field string, roles []string) int {
	if len(roles) == 0 {
		v.add(field, "at least one role is required")
		return 0
	}
	seen := map[string]bool{}
	for j, r := range roles {
		name := strings.TrimPrefix(r, RoleApprover+":")
		switch {
		case !approvalRoleRE.MatchString(r):
			v.add(indexPath(field, j), "invalid role %s (want a lowercase group name such as secops, or approver:<group>)", v.show(indexPath(field, j), r))
		case name == RoleOperator || name == RoleApprover:
			// Every operator token holds "operator", and "approver" is
			// an admin token's role too: as an approval group either
			// would make every such token an approver.
			v.add(indexPath(field, j), "role %s is reserved for admin tokens; name an approval group such as secops", v.show(indexPath(field, j), r))
		case seen[name]:
			v.add(indexPath(field, j), "duplicate role")
		}
		seen[name] = true
	}
	return len(seen)
}

func (v *validator) approvals(a Approvals, admin Admin) {
	if a.Keepalive <= 0 {
		v.add("approvals.keepalive", "must be positive")
	}
	if a.MaxPending < 1 {
		v.add("approvals.max_pending", "must be at least 1")
	}
	if a.MaxHeldBytes <= 0 {
		v.add("approvals.max_held_bytes", "must be positive")
	}
	if s := a.Slack; s != nil {
		v.slack(*s)
	}
	if w := a.Webhook; w != nil {
		v.webhook(*w)
	}
	v.people(a, admin)
}

// people checks that each approver is one identity: every credential
// belongs to one person at most, and no person's name is also the name an
// unlisted credential votes under, so no two identities can be one
// person's and no vote can be taken for another's.
func (v *validator) people(a Approvals, admin Admin) {
	tokens := map[string]bool{}
	for _, t := range admin.Tokens {
		tokens[t.Name] = true
	}
	slackNames := map[string]bool{}
	slackIDs := map[string]bool{}
	if a.Slack != nil {
		for _, u := range a.Slack.Users {
			slackNames[u.Name], slackIDs[u.SlackID] = true, true
		}
	}
	names := map[string]string{}
	tokenOwner := map[string]string{}
	ids := map[string]string{}
	subjects, emails := map[string]string{}, map[string]string{}
	for i, p := range a.People {
		at := indexPath("approvals.people", i)
		v.unique(names, at, "name", "person", p.Name)
		v.roles(fieldPath(at, "roles"), p.Roles)
		if len(p.AdminTokens) == 0 && p.SlackID == "" && p.Subject == "" && p.Email == "" {
			v.add(at, "none of admin_tokens, slack_id, subject or email: this person could never vote")
		}
		if p.Subject != "" {
			v.unique(subjects, at, "subject", "person", p.Subject)
		}
		if p.Email != "" {
			v.unique(emails, at, "email", "person", strings.ToLower(p.Email))
		}
		owns := map[string]bool{}
		for j, t := range p.AdminTokens {
			tf := indexPath(fieldPath(at, "admin_tokens"), j)
			switch {
			case !tokens[t]:
				v.add(tf, "no admin token is named %s", v.show(tf, t))
			case tokenOwner[t] != "":
				v.add(tf, "admin token %s already belongs to %s", v.show(tf, t), tokenOwner[t])
			default:
				tokenOwner[t] = at
			}
			owns[t] = true
		}
		if p.Name != "" && tokens[p.Name] && !owns[p.Name] {
			v.add(fieldPath(at, "name"), "is also the name of an admin token not listed in its admin_tokens: list it there, or rename one of them")
		}
		if p.Name != "" && slackNames[p.Name] {
			v.add(fieldPath(at, "name"), "is also a name in approvals.slack.users: map that Slack user with this person's slack_id instead")
		}
		if p.SlackID != "" {
			sf := fieldPath(at, "slack_id")
			switch {
			case ids[p.SlackID] != "":
				v.add(sf, "duplicate Slack user (also %s)", ids[p.SlackID])
			case slackIDs[p.SlackID]:
				v.add(sf, "this Slack user is also in approvals.slack.users: keep one of the two")
			default:
				ids[p.SlackID] = at
			}
		}
	}
}

// slack never quotes the token or the secret: they are secrets.
func (v *validator) slack(s Slack) {
	const at = "approvals.slack"
	if s.BotToken == "" {
		v.add(at+".bot_token", "required when approvals.slack is set")
	}
	if s.SigningSecret == "" {
		v.add(at+".signing_secret", "required when approvals.slack is set")
	}
	if strings.TrimSpace(s.Channel) == "" {
		v.add(at+".channel", "required when approvals.slack is set")
	}
	v.httpURL(at+".api_url", s.APIURL, "must be an absolute http:// or https:// URL, e.g. "+DefaultSlackAPIURL)
	ids := map[string]string{}
	names := map[string]string{}
	for i, u := range s.Users {
		uf := indexPath(at+".users", i)
		v.unique(ids, uf, "slack_id", "Slack user", u.SlackID)
		v.unique(names, uf, "name", "approver name", u.Name)
		v.roles(fieldPath(uf, "roles"), u.Roles)
	}
}

// webhook never quotes the URL or the secret: either may carry a credential.
func (v *validator) webhook(w Webhook) {
	const at = "approvals.webhook"
	if w.URL == "" {
		v.add(at+".url", "required when approvals.webhook is set")
	} else {
		v.httpURL(at+".url", w.URL, "must be an absolute http:// or https:// URL")
	}
	key, ok := strings.CutPrefix(w.Secret, WebhookSecretPrefix)
	switch {
	case w.Secret == "":
		v.add(at+".secret", "required when approvals.webhook is set")
	case !ok:
		v.add(at+".secret", "must start with %s (a Standard Webhooks secret)", WebhookSecretPrefix)
	default:
		if b, err := base64.StdEncoding.DecodeString(key); err != nil || len(b) == 0 {
			v.add(at+".secret", "must be %s followed by the base64 of the signing key", WebhookSecretPrefix)
		}
	}
}
