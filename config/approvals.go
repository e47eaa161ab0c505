package config

import "time"

// Gate is one approval gate: a CEL condition over a tool call, who may
// approve a call it matches, and for how long a request waits.
type Gate struct {
	Name string `yaml:"name" json:"name"`
	// When is a CEL expression over tool, trajectory and request that must
	// evaluate to a bool; approvals.Compile checks it.
	When string `yaml:"when" json:"when"`
	// Tenants limits the gate to these tenants; empty means every tenant.
	Tenants   []string  `yaml:"tenants" json:"tenants"`
	Approvers Approvers `yaml:"approvers" json:"approvers"`
	// Expiry is how long a request waits for its votes; silence is denial.
	Expiry    Duration `yaml:"expiry" json:"expiry"`
	OnRefusal string   `yaml:"on_refusal" json:"on_refusal"`
}

// Approvers says who must agree before a gated call is released.
type Approvers struct {
	// Roles are the approver roles of which a voter must hold one: an admin
	// token's role "approver:secops" gives role "secops".
	Roles  []string `yaml:"roles" json:"roles"`
	Quorum int      `yaml:"quorum" json:"quorum"`
	// DistinctRoles makes each counted approver cover a different role.
	DistinctRoles bool `yaml:"distinct_roles" json:"distinct_roles"`
}

// What a gate does when its request is denied, expires or goes stale.
const (
	OnRefusalContinue = "continue" // the model continues with a REFUSED result
	OnRefusalEndTurn  = "end_turn" // the call is replaced by a text block
)

// Approvals configures the escrow of gated calls and its channels.
type Approvals struct {
	// Keepalive is the period of keepalives on a held stream.
	Keepalive Duration `yaml:"keepalive" json:"keepalive"`
	// MaxPending bounds the pending requests of one trajectory root.
	MaxPending int `yaml:"max_pending" json:"max_pending"`
	// MaxHeldBytes bounds a held reply; a gated call past it is refused.
	MaxHeldBytes int64 `yaml:"max_held_bytes" json:"max_held_bytes"`
	// People are the approvers, each one identity whatever channel a vote
	// comes through: a quorum counts people.
	People  []Person `yaml:"people" json:"people"`
	Slack   *Slack   `yaml:"slack" json:"slack"`
	Webhook *Webhook `yaml:"webhook" json:"webhook"`
}

// Person is one approver and the credentials their votes arrive with: the
// admin tokens (by name), the Slack user and the console sign-in that are
// theirs. A vote through
// any of them is this person's, with these roles.
type Person struct {
	Name        string   `yaml:"name" json:"name"`
	AdminTokens []string `yaml:"admin_tokens" json:"admin_tokens"`
	SlackID     string   `yaml:"slack_id" json:"slack_id"`
	// Subject and Email match the person's sign-in to the console through
	// identity.console: the ID token's sub, else its email (unless the
	// provider marks it unverified). Subject is the stable choice where
	// the provider's sub is the same for the console's application.
	Subject string `yaml:"subject" json:"subject,omitempty"`
	Email   string `yaml:"email" json:"email,omitempty"`
	// Roles are approval groups, as gates name them (secops or
	// approver:secops).
	Roles []string `yaml:"roles" json:"roles"`
	// Tenants, when set, are the only tenants whose approval requests
	// this person may vote on, through any channel. Unset: every tenant.
	Tenants []string `yaml:"tenants" json:"tenants,omitempty"`
}

// Slack is the Slack channel approval requests are posted to, and who the
// people pressing its buttons are.
type Slack struct {
	BotToken      string      `yaml:"bot_token" json:"bot_token"`
	SigningSecret string      `yaml:"signing_secret" json:"signing_secret"`
	Channel       string      `yaml:"channel" json:"channel"`
	APIURL        string      `yaml:"api_url" json:"api_url"`
	Users         []SlackUser `yaml:"users" json:"users"`
}

// SlackUser maps a Slack user id to an approver's name and roles.
type SlackUser struct {
	SlackID string   `yaml:"slack_id" json:"slack_id"`
	Name    string   `yaml:"name" json:"name"`
	Roles   []string `yaml:"roles" json:"roles"`
}

// Webhook is a Standard Webhooks endpoint told of every request and decision.
type Webhook struct {
	URL string `yaml:"url" json:"url"`
	// Secret is "whsec_" followed by the base64 of the signing key.
	Secret string `yaml:"secret" json:"secret"`
}

// Defaults of gates and approvals.
const (
	DefaultGateExpiry   = 15 * time.Minute
	DefaultGateQuorum   = 1
	DefaultKeepalive    = 15 * time.Second
	DefaultMaxPending   = 16
	DefaultMaxHeldBytes = 8 << 20
	DefaultSlackAPIURL  = "https://slack.com/api"
)
