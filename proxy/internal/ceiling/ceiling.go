package ceiling

import (
	"fmt"
	"time"

	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// Limits converts a tenant's config to the ledger's units.
func Limits(t *config.Tenant) tenant.Limits {
	return tenant.Limits{
		MicrosPerDay:   meter.FromDollars(t.Limits.DollarsPerDay),
		MicrosPerMonth: meter.FromDollars(t.Limits.DollarsPerMonth),
		TokensPerDay:   t.Limits.TokensPerDay,
		MaxLive:        int64(t.Limits.MaxLiveTrajectories),
		NewPerHour:     int64(t.Limits.NewTrajectoriesPerHour),
	}
}

// Level ids of a tenant's windows, as meter.FitCall names them.
const (
	levelDay   = "day"
	levelMonth = "month"
)

// Levels are a tenant's windows as the meter weighs a call against them:
// the day's dollars and tokens, the month's dollars.
func Levels(t *config.Tenant, u tenant.Usage) []meter.Level {
	res := meter.Reservation{Micros: u.Reserved.Micros, Tokens: u.Reserved.Tokens}
	day, month := u.Day(), u.Month()
	return []meter.Level{
		{ID: levelDay, Budget: trajectory.Budget{Dollars: t.Limits.DollarsPerDay, Tokens: t.Limits.TokensPerDay},
			Used: meter.Used{Micros: day.Micros, Tokens: day.Tokens}, Reserved: res},
		{ID: levelMonth, Budget: trajectory.Budget{Dollars: t.Limits.DollarsPerMonth},
			Used: meter.Used{Micros: month.Micros}, Reserved: res},
	}
}

// Name is the config name of the ceiling a Fit over Levels binds on.
func Name(f meter.Fit) string {
	switch {
	case f.BindingID == levelMonth:
		return tenant.LimitDollarsPerMonth
	case f.Binding == meter.Tokens:
		return tenant.LimitTokensPerDay
	}
	return tenant.LimitDollarsPerDay
}

// Refusal is the message of a call its tenant's ceilings refuse: f, over
// the tenant's usage u, left too little for need.
func Refusal(tn *config.Tenant, u tenant.Usage, f meter.Fit, need meter.Reservation) string {
	name := Name(f)
	var limit, used, needed int64
	var left, window string
	month := f.BindingID == levelMonth
	spent := func(a tenant.Amount) int64 { return a.Micros }
	switch name {
	case tenant.LimitDollarsPerMonth:
		limit, used, needed, window = meter.FromDollars(tn.Limits.DollarsPerMonth), u.Month().Micros, need.Micros, "30 days"
		left = fmt.Sprintf("$%.4f of $%.2f", meter.ToDollars(max(limit-used-u.Reserved.Micros, 0)), tn.Limits.DollarsPerMonth)
	case tenant.LimitTokensPerDay:
		limit, used, needed, window = tn.Limits.TokensPerDay, u.Day().Tokens, need.Tokens, "24 hours"
		spent = func(a tenant.Amount) int64 { return a.Tokens }
		left = fmt.Sprintf("%d of %d tokens", max(limit-used-u.Reserved.Tokens, 0), limit)
	default:
		limit, used, needed, window = meter.FromDollars(tn.Limits.DollarsPerDay), u.Day().Micros, need.Micros, "24 hours"
		left = fmt.Sprintf("$%.4f of $%.2f", meter.ToDollars(max(limit-used-u.Reserved.Micros, 0)), tn.Limits.DollarsPerDay)
	}
	resets := "; no call this large ever fits it"
	if at, ok := u.FreesAt(month, spent, needed, limit); ok {
		resets = "; it resets, as earlier spend leaves the window, at " + at.Format(time.RFC3339)
	}
	return fmt.Sprintf("tenant %s has reached its %s limit (%s left over the last %s, not enough for this call's input and a minimal reply); the call was not forwarded%s",
		tn.Name, name, left, window, resets)
}
