package ceiling

import (
	"fmt"
	"time"

	"gatekeeper/meter"
	"gatekeeper/spendlimit"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// Level ids of a person's windows, as meter.FitCall names them.
const (
	levelPersonDay   = "person-day"
	levelPersonWeek  = "person-week"
	levelPersonMonth = "person-month"
)

// PersonLevels are a person's caps as the meter weighs a call against
// them: the day's, the week's and the month's dollars.
func PersonLevels(c spendlimit.Caps, u tenant.Usage) []meter.Level {
	res := meter.Reservation{Micros: u.Reserved.Micros, Tokens: u.Reserved.Tokens}
	ls := make([]meter.Level, 0, 3)
	add := func(id string, l *spendlimit.Limit, used int64) {
		if l != nil {
			ls = append(ls, meter.Level{ID: id, Budget: trajectory.Budget{Dollars: meter.ToDollars(l.Micros)},
				Used: meter.Used{Micros: used}, Reserved: res})
		}
	}
	add(levelPersonDay, c.Day, u.Day().Micros)
	add(levelPersonWeek, c.Week, u.Week().Micros)
	add(levelPersonMonth, c.Month, u.Month().Micros)
	return ls
}

// PersonBinding is the cap a Fit over PersonLevels binds on.
func PersonBinding(c spendlimit.Caps, f meter.Fit) *spendlimit.Limit {
	switch f.BindingID {
	case levelPersonWeek:
		return c.Week
	case levelPersonMonth:
		return c.Month
	case levelPersonDay:
		return c.Day
	}
	// No level bound: name the first cap there is.
	switch {
	case c.Day != nil:
		return c.Day
	case c.Week != nil:
		return c.Week
	}
	return c.Month
}

// PersonRefusal is the message of a call a person's caps refuse: f, over
// the person's usage u, left too little for need. It names the cap (whose
// it is, its amount and period) and when it frees room.
func PersonRefusal(who string, c spendlimit.Caps, u tenant.Usage, f meter.Fit, need meter.Reservation) string {
	l := PersonBinding(c, f)
	var used int64
	var window string
	var at time.Time
	var ok bool
	spent := func(a tenant.Amount) int64 { return a.Micros }
	switch l {
	case c.Week:
		used, window = u.Week().Micros, "7 days"
		at, ok = u.FreesAtDays(tenant.WeekBuckets, spent, need.Micros, l.Micros)
	case c.Month:
		used, window = u.Month().Micros, "30 days"
		at, ok = u.FreesAtDays(tenant.DayBuckets, spent, need.Micros, l.Micros)
	default:
		used, window = u.Day().Micros, "24 hours"
		at, ok = u.FreesAt(false, spent, need.Micros, l.Micros)
	}
	left := max(l.Micros-used-u.Reserved.Micros, 0)
	resets := "; no call this large ever fits it"
	if ok {
		resets = "; it resets, as earlier spend leaves the window, at " + at.Format(time.RFC3339)
	}
	return fmt.Sprintf("%s has reached %s ($%.4f left over the last %s, not enough for this call's input and a minimal reply); the call was not forwarded%s",
		who, l.Describe(), meter.ToDollars(left), window, resets)
}
