package memory

import "time"

// expiries orders ids by a time, earliest first: what a ledger drops as
// time passes, found without looking at what it keeps. It is a binary
// min-heap.
type expiries struct{ h []expiry }

type expiry struct {
	at time.Time
	id string
}

// push adds id at at.
func (q *expiries) push(id string, at time.Time) {
	q.h = append(q.h, expiry{at: at, id: id})
	for i := len(q.h) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.h[i].at.Before(q.h[p].at) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

// first is the earliest entry, without taking it.
func (q *expiries) first() (id string, at time.Time, ok bool) {
	if len(q.h) == 0 {
		return "", time.Time{}, false
	}
	return q.h[0].id, q.h[0].at, true
}

// due takes the earliest entry if it is at or before now.
func (q *expiries) due(now time.Time) (id string, at time.Time, ok bool) {
	if len(q.h) == 0 || q.h[0].at.After(now) {
		return "", time.Time{}, false
	}
	e := q.h[0]
	n := len(q.h) - 1
	q.h[0] = q.h[n]
	q.h[n] = expiry{}
	q.h = q.h[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && q.h[l].at.Before(q.h[m].at) {
			m = l
		}
		if r < n && q.h[r].at.Before(q.h[m].at) {
			m = r
		}
		if m == i {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	return e.id, e.at, true
}
