package admin

import (
	"errors"
	"strconv"
	"testing"

	"gatekeeper/config"
	"gatekeeper/spendlimit"
)

// FuzzParseSpendLimit: any body gets a limit or a 400 of the admin API,
// never a panic, and a limit holds only a scope, period and amount the
// proxy's limits accept.
func FuzzParseSpendLimit(f *testing.F) {
	for _, s := range []string{`{"scope":{"type":"organization"},"amount":"50000","period":"monthly"}`,
		`{"scope":{"type":"rbac_group","rbac_group_id":"contractors"},"amount":"10000","period":"daily"}`,
		`{"scope":{"type":"user","user_id":"ada"},"amount":"1","period":"weekly","tenant":"fleet"}`,
		`{"scope":{"type":"user"},"amount":"1","period":"weekly"}`, `{"amount":"007"}`, `{"amount":null}`, `{"amount":"5"} {}`,
		`{"scope":{"type":"organization","user_id":"x"},"amount":"1","period":"daily"}`, ``, `[]`, `{"Amount":"1"}`} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, b []byte, whole bool) {
		req, cents, err := parseSpendLimitRequest(b, whole)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != 400 {
				t.Fatalf("error %v is not a 400 of the admin API", err)
			}
			return
		}
		if cents <= 0 || cents > maxSpendCents || req.Amount == nil || strconv.FormatInt(cents, 10) != *req.Amount {
			t.Fatalf("amount %v read as %d cents", req.Amount, cents)
		}
		if !whole {
			return
		}
		switch req.Period {
		case config.PeriodDaily, config.PeriodWeekly, config.PeriodMonthly:
		default:
			t.Fatalf("period %q", req.Period)
		}
		s := req.Scope
		ok := s != nil && (s.Type == spendlimit.ScopeUser && s.UserID != "" && s.GroupID == "" ||
			s.Type == spendlimit.ScopeGroup && s.GroupID != "" && s.UserID == "" ||
			s.Type == spendlimit.ScopeOrganization && s.UserID == "" && s.GroupID == "")
		if !ok {
			t.Fatalf("scope %+v", s)
		}
	})
}
