package approvals

import (
	"slices"

	"gatekeeper/config"
)

// Approver is who casts a vote: a person's name and roles, whatever
// credential the vote arrived with.
type Approver struct {
	Name  string
	Roles []string
	// Credential says what the vote arrived with, for the record: "admin
	// token <name>" or "slack user <id>".
	Credential string
	// Tenants are the only tenants whose requests the person may vote on
	// (approvals.people[].tenants); nil: every tenant.
	Tenants []string
}

// Directory maps the credentials votes arrive with to the people who cast
// them (approvals.people), so that one person voting through Slack and
// through the admin API counts once. Credentials no person lists keep
// their own identity: an admin token votes as its name with its roles, a
// Slack user of approvals.slack.users as the name and roles mapped there.
type Directory struct {
	byToken map[string]*config.Person
	bySlack map[string]*config.Person
	slack   map[string]config.SlackUser
}

// NewDirectory returns the directory of cfg's people and Slack users;
// config validation has made sure each credential has one owner.
func NewDirectory(cfg config.Approvals) *Directory {
	d := &Directory{
		byToken: map[string]*config.Person{},
		bySlack: map[string]*config.Person{},
		slack:   map[string]config.SlackUser{},
	}
	for i := range cfg.People {
		p := &cfg.People[i]
		for _, t := range p.AdminTokens {
			d.byToken[t] = p
		}
		if p.SlackID != "" {
			d.bySlack[p.SlackID] = p
		}
	}
	if cfg.Slack != nil {
		for _, u := range cfg.Slack.Users {
			d.slack[u.SlackID] = u
		}
	}
	return d
}

// Admin returns who votes with the admin token named token, which holds
// roles: the person the token belongs to, with the person's roles, else
// the token itself.
func (d *Directory) Admin(token string, roles []string) Approver {
	cred := "admin token " + token
	if d != nil {
		if p, ok := d.byToken[token]; ok {
			return Approver{Name: p.Name, Roles: slices.Clone(p.Roles), Credential: cred, Tenants: p.Tenants}
		}
	}
	return Approver{Name: token, Roles: slices.Clone(roles), Credential: cred}
}

// Slack returns who votes as the Slack user id; false when nobody is
// mapped to it.
func (d *Directory) Slack(id string) (Approver, bool) {
	if d == nil || id == "" {
		return Approver{}, false
	}
	cred := "slack user " + id
	if p, ok := d.bySlack[id]; ok {
		return Approver{Name: p.Name, Roles: slices.Clone(p.Roles), Credential: cred, Tenants: p.Tenants}, true
	}
	if u, ok := d.slack[id]; ok {
		return Approver{Name: u.Name, Roles: slices.Clone(u.Roles), Credential: cred}, true
	}
	return Approver{}, false
}
