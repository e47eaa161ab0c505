package memory

import (
	"context"
	"slices"
	"sync"
	"time"

	"gatekeeper/tenant"
)

// Ledger keeps tenants' spend in this process's memory. It is safe for
// concurrent use.
type Ledger struct {
	now func() time.Time

	mu      sync.Mutex
	tenants map[string]*book
}

var _ tenant.Ledger = (*Ledger)(nil)

// book is one tenant's ledger. Everything a turn reads is kept as a
// running total, and what expires leaves through a queue ordered by its
// expiry, so that no call costs more for the calls, runs or hours before
// it: a settled call is remembered for an hour, and a busy tenant settles
// many thousands in that time.
type book struct {
	hours map[int64]tenant.Amount // at most HourBuckets+1 entries
	days  map[int64]tenant.Amount // at most DayBuckets+1 entries
	calls map[string]held
	// callsOut orders calls by when they expire; an entry whose call was
	// replaced since (reserved again, or settled) is passed over.
	callsOut expiries
	reserved tenant.Amount // held by the calls not settled
	inFlight int64
	live     map[string]struct{}
	started  map[string]time.Time
	// startsOut orders started by start: its first entry is the oldest.
	startsOut expiries
}

// held is a call's reservation, or, once settled (settled set), the mark
// that makes a repeated settle change nothing, both until expires.
type held struct {
	r       tenant.Amount
	expires time.Time
	settled bool
}

// settledKept is how long a settled call is remembered: longer than any
// settle is retried.
const settledKept = time.Hour

// startedKept is how long a started run counts toward the hourly limit.
const startedKept = time.Hour

// NewLedger returns an empty ledger reading the time from now (time.Now
// when nil).
func NewLedger(now func() time.Time) *Ledger {
	if now == nil {
		now = time.Now
	}
	return &Ledger{now: now, tenants: make(map[string]*book)}
}

// book returns the tenant's book with what left its windows dropped; the
// caller holds mu. Its cost is what expired since the last call, never
// what is kept.
func (l *Ledger) book(name string, now time.Time) *book {
	b, ok := l.tenants[name]
	if !ok {
		b = &book{hours: map[int64]tenant.Amount{}, days: map[int64]tenant.Amount{}, calls: map[string]held{},
			live: map[string]struct{}{}, started: map[string]time.Time{}}
		l.tenants[name] = b
	}
	if h := tenant.HourIndex(now); len(b.hours) > tenant.HourBuckets {
		for i := range b.hours {
			if i <= h-tenant.HourBuckets {
				delete(b.hours, i)
			}
		}
	}
	if d := tenant.DayIndex(now); len(b.days) > tenant.DayBuckets {
		for i := range b.days {
			if i <= d-tenant.DayBuckets {
				delete(b.days, i)
			}
		}
	}
	for {
		id, at, ok := b.callsOut.due(now)
		if !ok {
			break
		}
		if c, ok := b.calls[id]; ok && c.expires.Equal(at) {
			b.drop(id, c)
		}
	}
	for {
		id, at, ok := b.startsOut.due(now.Add(-startedKept))
		if !ok {
			break
		}
		if s, ok := b.started[id]; ok && s.Equal(at) {
			delete(b.started, id)
		}
	}
	return b
}

// hold keeps c as call id's entry, in place of any before it.
func (b *book) hold(id string, c held) {
	if old, ok := b.calls[id]; ok {
		b.drop(id, old)
	}
	b.calls[id] = c
	b.callsOut.push(id, c.expires)
	if !c.settled {
		b.reserved = b.reserved.Add(c.r)
		b.inFlight++
	}
}

// drop forgets call id, whose entry is c.
func (b *book) drop(id string, c held) {
	delete(b.calls, id)
	if !c.settled {
		b.reserved = b.reserved.Add(tenant.Amount{Micros: -c.r.Micros, Tokens: -c.r.Tokens})
		b.inFlight--
	}
}

func (b *book) usage(now time.Time) tenant.Usage {
	u := tenant.Usage{Now: now, Live: int64(len(b.live)), Started: int64(len(b.started)),
		Reserved: b.reserved, InFlight: b.inFlight}
	h, d := tenant.HourIndex(now), tenant.DayIndex(now)
	for i := range u.Hours {
		u.Hours[i] = b.hours[h-tenant.HourBuckets+1+int64(i)]
	}
	for i := range u.Days {
		u.Days[i] = b.days[d-tenant.DayBuckets+1+int64(i)]
	}
	if _, at, ok := b.startsOut.first(); ok {
		u.OldestStart = at
	}
	return u
}

// InProcess reports that the ledger's calls wait on nothing outside the
// process (only on its lock): they need no deadline of their own.
func (l *Ledger) InProcess() bool { return true }

// Usage implements tenant.Ledger.
func (l *Ledger) Usage(ctx context.Context, name string) (tenant.Usage, error) {
	if err := ctx.Err(); err != nil {
		return tenant.Usage{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	return l.book(name, now).usage(now), nil
}

// Reserve implements tenant.Ledger.
func (l *Ledger) Reserve(ctx context.Context, name, call string, r tenant.Amount, lim tenant.Limits, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.book(name, now)
	u := b.usage(now)
	day, week, month := u.Day().Add(u.Reserved).Add(r), u.Week().Add(u.Reserved).Add(r), u.Month().Add(u.Reserved).Add(r)
	if over(day.Micros, lim.MicrosPerDay) || over(week.Micros, lim.MicrosPerWeek) || over(month.Micros, lim.MicrosPerMonth) || over(day.Tokens, lim.TokensPerDay) {
		return false, nil
	}
	b.hold(call, held{r: r, expires: now.Add(ttl)})
	return true, nil
}

// over reports whether n passes a ceiling; 0 is none.
func over(n, ceiling int64) bool { return ceiling > 0 && n > ceiling }

// Settle implements tenant.Ledger.
func (l *Ledger) Settle(ctx context.Context, name, call string, used tenant.Amount) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.book(name, now)
	if call != "" {
		if c, ok := b.calls[call]; ok && c.settled {
			return nil
		}
		b.hold(call, held{settled: true, expires: now.Add(settledKept)})
	}
	h, d := tenant.HourIndex(now), tenant.DayIndex(now)
	b.hours[h] = b.hours[h].Add(used)
	b.days[d] = b.days[d].Add(used)
	return nil
}

// StartRun implements tenant.Ledger.
func (l *Ledger) StartRun(ctx context.Context, name, id string, lim tenant.Limits) (tenant.Start, error) {
	if err := ctx.Err(); err != nil {
		return tenant.Start{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.book(name, now)
	_, live := b.live[id]
	_, started := b.started[id]
	if lim.MaxLive > 0 && !live && int64(len(b.live)) >= lim.MaxLive {
		return tenant.Start{Refused: tenant.LimitLive}, nil
	}
	if lim.NewPerHour > 0 && !started && int64(len(b.started)) >= lim.NewPerHour {
		u := b.usage(now)
		return tenant.Start{Refused: tenant.LimitNewPerHour, Retry: u.OldestStart.Add(time.Hour)}, nil
	}
	if lim.MaxLive > 0 {
		b.live[id] = struct{}{}
	}
	if lim.NewPerHour > 0 && !started {
		b.started[id] = now
		b.startsOut.push(id, now)
	}
	return tenant.Start{}, nil
}

// LiveRuns implements tenant.Ledger.
func (l *Ledger) LiveRuns(ctx context.Context, name string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.book(name, l.now())
	ids := make([]string, 0, len(b.live))
	for id := range b.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// EndRuns implements tenant.Ledger.
func (l *Ledger) EndRuns(ctx context.Context, name string, ids ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.book(name, l.now())
	for _, id := range ids {
		delete(b.live, id)
	}
	return nil
}
