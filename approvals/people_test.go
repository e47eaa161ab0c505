package approvals

import (
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
