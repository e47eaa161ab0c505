package ceiling

import (
	"strings"
	"testing"

	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/tenant"
)

func TestLimitsAndNames(t *testing.T) {
	tn := &config.Tenant{Name: "acme"}
	tn.Limits.DollarsPerDay, tn.Limits.DollarsPerMonth, tn.Limits.TokensPerDay = 2, 30, 1000
	lim := Limits(tn)
	if lim.MicrosPerDay != meter.FromDollars(2) || lim.MicrosPerMonth != meter.FromDollars(30) || lim.TokensPerDay != 1000 || !lim.Spends() {
		t.Fatalf("Limits = %+v", lim)
	}
	ls := Levels(tn, tenant.Usage{})
	if len(ls) != 2 || ls[0].ID != levelDay || ls[1].ID != levelMonth {
		t.Fatalf("Levels = %+v: want the day's, then the month's", ls)
	}
	tests := []struct {
		fit  meter.Fit
		want string
	}{
		{meter.Fit{BindingID: levelMonth, Binding: meter.Dollars}, tenant.LimitDollarsPerMonth},
		{meter.Fit{BindingID: levelDay, Binding: meter.Tokens}, tenant.LimitTokensPerDay},
		{meter.Fit{BindingID: levelDay, Binding: meter.Dollars}, tenant.LimitDollarsPerDay},
	}
	for _, tc := range tests {
		if got := Name(tc.fit); got != tc.want {
			t.Errorf("Name(%+v) = %s, want %s", tc.fit, got, tc.want)
		}
		msg := Refusal(tn, tenant.Usage{}, tc.fit, meter.Reservation{Micros: meter.FromDollars(100), Tokens: 1 << 20})
		if !strings.Contains(msg, "tenant acme has reached its "+tc.want+" limit") {
			t.Errorf("Refusal for %s: %q", tc.want, msg)
		}
	}
}
