package approvals

import (
	"slices"
	"strings"

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
	byToken   map[string]*config.Person
	bySlack   map[string]*config.Person
	bySubject map[string]*config.Person
	byEmail   map[string]*config.Person // lower case
	slack     map[string]config.SlackUser
}

// NewDirectory returns the directory of cfg's people and Slack users;
// config validation has made sure each credential has one owner.
func NewDirectory(cfg config.Approvals) *Directory {
	d := &Directory{
		byToken:   map[string]*config.Person{},
		bySlack:   map[string]*config.Person{},
		bySubject: map[string]*config.Person{},
		byEmail:   map[string]*config.Person{},
		slack:     map[string]config.SlackUser{},
	}
	for i := range cfg.People {
		p := &cfg.People[i]
		for _, t := range p.AdminTokens {
			d.byToken[t] = p
		}
		if p.SlackID != "" {
			d.bySlack[p.SlackID] = p
		}
		if p.Subject != "" {
			d.bySubject[p.Subject] = p
		}
		if p.Email != "" {
			d.byEmail[strings.ToLower(p.Email)] = p
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

// SignIn is who a person signed in to the console votes as: the person
// (approvals.people) whose subject is the sign-in's, else whose email is
// (an email the provider marked unverified matches nobody), with that
// person's roles and tenants; else the signed-in person themself, with
// roles, named "<name> (<subject>)": the provider's subject in the name
// keeps an unmapped sign-in from ever voting as a configured person or
// an admin token of the same name. Credential names the subject.
func (d *Directory) SignIn(s SignedIn, roles []string) Approver {
	cred := "console sign-in " + s.Subject
	if d != nil {
		p, ok := d.bySubject[s.Subject]
		if !ok && s.Email != "" && s.EmailVerified {
			p, ok = d.byEmail[strings.ToLower(s.Email)]
		}
		if ok {
			return Approver{Name: p.Name, Roles: slices.Clone(p.Roles), Credential: cred, Tenants: p.Tenants}
		}
	}
	return Approver{Name: s.Name + " (" + s.Subject + ")", Roles: slices.Clone(roles), Credential: cred}
}

// SignedIn is what a console sign-in says of its person.
type SignedIn struct {
	Subject       string
	Name          string
	Email         string
	EmailVerified bool
}
