package approvals

import (
	"fmt"
	"slices"
	"testing"

	"gatekeeper/config"
)

func TestDirectory(t *testing.T) {
	d := NewDirectory(config.Approvals{
		People: []config.Person{{Name: "erin", AdminTokens: []string{"erin-laptop", "erin-ci"}, SlackID: "UERIN", Roles: []string{"secops"}}},
		Slack:  &config.Slack{Users: []config.SlackUser{{SlackID: "UCAROL", Name: "carol", Roles: []string{"sre"}}}},
	})
	admin := []struct {
		name, token string
		roles       []string
		want        Approver
	}{
		{"a person's token votes as the person, with the person's roles", "erin-ci", []string{"operator"},
			Approver{Name: "erin", Roles: []string{"secops"}, Credential: "admin token erin-ci"}},
		{"an unlisted token votes as itself", "carol", []string{"approver:sre"},
			Approver{Name: "carol", Roles: []string{"approver:sre"}, Credential: "admin token carol"}},
	}
	for _, c := range admin {
		t.Run(c.name, func(t *testing.T) {
			got := d.Admin(c.token, c.roles)
			if got.Name != c.want.Name || !slices.Equal(got.Roles, c.want.Roles) || got.Credential != c.want.Credential {
				t.Errorf("Admin(%s) = %+v, want %+v", c.token, got, c.want)
			}
		})
	}
	slack := []struct {
		name, id string
		want     Approver
		ok       bool
	}{
		{"a person's Slack user", "UERIN", Approver{Name: "erin", Roles: []string{"secops"}, Credential: "slack user UERIN"}, true},
		{"a Slack user of approvals.slack.users", "UCAROL", Approver{Name: "carol", Roles: []string{"sre"}, Credential: "slack user UCAROL"}, true},
		{"nobody", "UMALLORY", Approver{}, false},
		{"no id", "", Approver{}, false},
	}
	for _, c := range slack {
		t.Run(c.name, func(t *testing.T) {
			got, ok := d.Slack(c.id)
			if ok != c.ok || got.Name != c.want.Name || !slices.Equal(got.Roles, c.want.Roles) || got.Credential != c.want.Credential {
				t.Errorf("Slack(%s) = %+v %v, want %+v %v", c.id, got, ok, c.want, c.ok)
			}
		})
	}
	// The roles returned are copies: a vote cannot change the config.
	got := d.Admin("erin-laptop", nil)
	got.Roles[0] = "changed"
	if again := d.Admin("erin-laptop", nil); again.Roles[0] != "secops" {
		t.Error("Admin shares the person's roles")
	}
}

// TestDirectorySignIn: a console sign-in is the person whose subject it
// carries, else whose verified email; an unmapped sign-in is named with its
// subject, so it can never pass for a configured person of the same name.
func TestDirectorySignIn(t *testing.T) {
	d := NewDirectory(config.Approvals{People: []config.Person{
		{Name: "carol", Subject: "u-carol", Roles: []string{"secops"}, Tenants: []string{"fleet"}},
		{Name: "dan", Email: "Dan@Example.com", Roles: []string{"dba"}},
	}})
	cases := []struct {
		name  string
		in    SignedIn
		want  string
		roles string
	}{
		{"by subject", SignedIn{Subject: "u-carol", Name: "Carol C", Email: "other@example.com", EmailVerified: true}, "carol", "[secops]"},
		{"by verified email, any case", SignedIn{Subject: "u-dan", Name: "Dan", Email: "dan@example.com", EmailVerified: true}, "dan", "[dba]"},
		{"unverified email", SignedIn{Subject: "u-x", Name: "dan", Email: "dan@example.com"}, "dan (u-x)", "[approver:ops]"},
		{"unmapped, a person's name", SignedIn{Subject: "u-y", Name: "carol"}, "carol (u-y)", "[approver:ops]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := d.SignIn(tc.in, []string{"approver:ops"})
			if a.Name != tc.want || fmt.Sprint(a.Roles) != tc.roles || a.Credential != "console sign-in "+tc.in.Subject {
				t.Fatalf("got %+v, want %s with %s", a, tc.want, tc.roles)
			}
		})
	}
}
