package tenant

import (
	"context"
	"time"
)

// Limits are a tenant's ceilings; zero means none.
type Limits struct {
	MicrosPerDay   int64 // dollars over the last 24 hours, in micro-dollars
	MicrosPerMonth int64 // dollars over the last 30 days, in micro-dollars
	MicrosPerWeek  int64 // dollars over the last 7 days, in micro-dollars
	TokensPerDay   int64 // tokens over the last 24 hours
	MaxLive        int64 // runs not finished
	NewPerHour     int64 // runs started over the last hour, by agents or operators
}

// Spends reports whether any ceiling bounds the tenant's spend, so that
// its calls must reserve against the ledger.
func (l Limits) Spends() bool {
	return l.MicrosPerDay > 0 || l.MicrosPerWeek > 0 || l.MicrosPerMonth > 0 || l.TokensPerDay > 0
}

// Amount is spend in the two dimensions a tenant's windows count.
type Amount struct {
	Micros int64 `json:"micros"`
	Tokens int64 `json:"tokens"`
}

// Add returns a plus o.
func (a Amount) Add(o Amount) Amount {
	return Amount{Micros: a.Micros + o.Micros, Tokens: a.Tokens + o.Tokens}
}

// The windows: the day is 24 hourly buckets, the week the last 7 daily
// ones and the month 30 daily ones, the current bucket included. Spend
// leaves a window a whole bucket at a time.
const (
	HourBuckets = 24
	WeekBuckets = 7
	DayBuckets  = 30
)

// Usage is a tenant's ledger as read at Now.
type Usage struct {
	Now time.Time
	// Hours are the spend of each hour of the day window, oldest first:
	// Hours[HourBuckets-1] is the hour Now is in. Days likewise for the
	// month window.
	Hours [HourBuckets]Amount
	Days  [DayBuckets]Amount
	// Reserved is what the calls in flight hold, InFlight their count.
	Reserved Amount
	InFlight int64
	// Live is how many runs the ledger counts as not finished (kept only
	// while max_live_trajectories is set), Started the runs started
	// in the last hour and OldestStart the first of them.
	Live        int64
	Started     int64
	OldestStart time.Time
}

// Day is the spend of the last 24 hours.
func (u Usage) Day() Amount {
	var a Amount
	for _, h := range u.Hours {
		a = a.Add(h)
	}
	return a
}

// Week is the spend of the last 7 days (the last WeekBuckets daily
// buckets).
func (u Usage) Week() Amount {
	var a Amount
	for _, d := range u.Days[DayBuckets-WeekBuckets:] {
		a = a.Add(d)
	}
	return a
}

// Month is the spend of the last 30 days.
func (u Usage) Month() Amount {
	var a Amount
	for _, d := range u.Days {
		a = a.Add(d)
	}
	return a
}

// HourIndex and DayIndex number the buckets: the hours and the days since
// the Unix epoch, in UTC.
func HourIndex(t time.Time) int64 { return t.Unix() / 3600 }
func DayIndex(t time.Time) int64  { return t.Unix() / 86400 }

// FreesAt is when enough of a window's spend leaves it for need more to
// fit within limit: the end of the day window for the hourly buckets
// (month false), of the month window for the daily ones. spent picks the
// dimension of each bucket. ok is false when need cannot fit even in an
// empty window.
func (u Usage) FreesAt(month bool, spent func(Amount) int64, need, limit int64) (at time.Time, ok bool) {
	if month {
		return u.FreesAtDays(DayBuckets, spent, need, limit)
	}
	return u.freesAt(u.Hours[:], 3600, HourIndex(u.Now), spent, need, limit)
}

// FreesAtDays is FreesAt over the window of the last days daily buckets
// (WeekBuckets for the week, DayBuckets for the month).
func (u Usage) FreesAtDays(days int, spent func(Amount) int64, need, limit int64) (at time.Time, ok bool) {
	days = min(max(days, 1), DayBuckets)
	return u.freesAt(u.Days[DayBuckets-days:], 86400, DayIndex(u.Now), spent, need, limit)
}

// freesAt walks buckets, oldest first, the last of them the one cur
// numbers, each width seconds long.
func (u Usage) freesAt(buckets []Amount, width, cur int64, spent func(Amount) int64, need, limit int64) (time.Time, bool) {
	if need > limit {
		return time.Time{}, false
	}
	var used int64
	for _, b := range buckets {
		used += spent(b)
	}
	if used+need <= limit {
		return u.Now, true
	}
	for i, b := range buckets {
		// Bucket i leaves the window when the bucket n after it begins.
		used -= spent(b)
		if used+need <= limit {
			return time.Unix((cur+1+int64(i))*width, 0).UTC(), true
		}
	}
	return time.Unix((cur+int64(len(buckets)))*width, 0).UTC(), true
}

// Start is a ledger's answer to a run about to start.
type Start struct {
	// Refused names the limit that refuses it: "" when it may start,
	// LimitLive or LimitNewPerHour.
	Refused string
	// Retry is when LimitNewPerHour next lets a run start.
	Retry time.Time
}

// Names of the limits, as config spells them.
const (
	LimitDollarsPerDay   = "dollars_per_day"
	LimitDollarsPerMonth = "dollars_per_month"
	LimitDollarsPerWeek  = "dollars_per_week"
	LimitTokensPerDay    = "tokens_per_day"
	LimitLive            = "max_live_trajectories"
	LimitNewPerHour      = "new_trajectories_per_hour"
)

// Ledger keeps each tenant's spend over its windows, its calls in flight
// and its live runs, shared by every replica. store/storetest holds its
// contract suite.
type Ledger interface {
	// Usage reads a tenant's ledger.
	Usage(ctx context.Context, tenant string) (Usage, error)
	// Reserve holds r for call, atomically, if the windows' spend, the
	// calls in flight and r together stay within lim; ok is false, and
	// nothing held, otherwise. A reservation lapses after ttl should its
	// call never settle (its replica gone).
	Reserve(ctx context.Context, tenant, call string, r Amount, lim Limits, ttl time.Duration) (ok bool, err error)
	// Settle ends call: its reservation is released and used added to the
	// current buckets. It is idempotent by call; a call that reserved
	// nothing ("" or lapsed) is charged all the same.
	Settle(ctx context.Context, tenant, call string, used Amount) error
	// StartRun counts run id as live (while lim.MaxLive is set) and as
	// started this hour (while lim.NewPerHour is), atomically, unless one
	// of those limits refuses it. Counting an id again changes nothing and
	// is never refused.
	StartRun(ctx context.Context, tenant, id string, lim Limits) (Start, error)
	// LiveRuns lists the runs counted live, and EndRuns forgets some: the
	// caller prunes the runs that finished or expired.
	LiveRuns(ctx context.Context, tenant string) ([]string, error)
	EndRuns(ctx context.Context, tenant string, ids ...string) error
}
