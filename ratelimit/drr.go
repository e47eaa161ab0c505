package ratelimit

import (
	"container/list"
	"time"
)

// Quantum is what one round of deficit round-robin credits a class queue
// per unit of weight, in estimated tokens. Its size only sets the grain of
// the shares: a round in which no queue can afford its head is skipped
// over arithmetically (pool.skipAhead), so a 200k-token batch turn costs
// no busy rounds.
const Quantum = 1000

// creditGrace is how long a class whose queue emptied keeps its credit
// (at most one round's, Quantum×weight): turns that come back to back, as
// from agents with short turns, are not charged for the instant their
// queue was empty. After it the class starts from nothing: no credit is
// banked over a long absence.
const creditGrace = 100 * time.Millisecond

// waiter is a turn waiting in a class queue.
type waiter struct {
	class  string
	keys   []Key
	est    Cost
	charge int64     // est.Tokens(), at least 1
	enq    time.Time // on the scheduler's clock
	ready  chan result

	q  *queue        // nil once out of its queue
	el *list.Element // its element in q.items
}

// result is what the dispatcher hands a waiter: a grant or an error.
type result struct {
	g   *Grant
	err error
}

// queue is one class's waiting turns in a pool, oldest first, and the
// class's deficit: the tokens it may still be served in this round.
type queue struct {
	class   string
	weight  int64
	items   list.List // of *waiter
	deficit int64
	emptied time.Time // when items last became empty
}

func (q *queue) head() *waiter {
	if e := q.items.Front(); e != nil {
		return e.Value.(*waiter)
	}
	return nil
}

// pool is the waiting turns of one set of keys (one provider's pool): it
// has its own queues and round-robin, so that a pool out of capacity never
// holds up turns for another.
type pool struct {
	id     string
	keys   []Key // of the turn that made the pool, for RetryAfter estimates
	queues []*queue
	class  map[string]*queue
	n      int // waiters in all queues

	cur      int  // the queue whose turn it is
	credited bool // whether queues[cur] got its quantum this visit

	// blockedUntil is when a key may have room for the head turn again,
	// as the last Take said; zero when not blocked.
	blockedUntil time.Time
}

func newPool(id string, keys []Key, classes []string, weights map[string]int) *pool {
	p := &pool{id: id, keys: keys, class: make(map[string]*queue, len(classes))}
	for _, c := range classes {
		q := &queue{class: c, weight: int64(weights[c])}
		p.queues = append(p.queues, q)
		p.class[c] = q
	}
	return p
}

func (p *pool) push(w *waiter, now time.Time) {
	q := p.class[w.class]
	if q.items.Len() == 0 && now.Sub(q.emptied) > creditGrace {
		q.deficit = 0
	}
	w.q, w.el = q, q.items.PushBack(w)
	p.n++
}

// remove takes w out of its queue. A queue left empty keeps at most one
// round's credit, for creditGrace (see push).
func (p *pool) remove(w *waiter, now time.Time) {
	q := w.q
	q.items.Remove(w.el)
	w.q, w.el = nil, nil
	p.n--
	if q.items.Len() == 0 {
		q.deficit = min(q.deficit, Quantum*q.weight)
		q.emptied = now
	}
	// The head may have changed: whatever blocked the old one says
	// nothing of the new.
	p.blockedUntil = time.Time{}
}

// admit charges w's class for w and takes w out of its queue.
func (p *pool) admit(w *waiter, now time.Time) {
	w.q.deficit -= w.charge
	p.remove(w, now)
}

// next is the turn deficit round-robin serves next: the head of the
// current queue when its deficit covers the head's charge, else the next
// queue's, each queue being credited Quantum×weight once per visit. nil
// when the pool is empty. The choice stays the same until the turn is
// admitted or leaves: a turn that waits for capacity keeps its class's
// turn, so large turns are not overtaken forever by small ones.
func (p *pool) next() *waiter {
	if p.n == 0 {
		return nil
	}
	// Two rounds at most: after a round in which no head was
	// affordable, skipAhead credits all but the last round needed.
	for visited := 0; ; visited++ {
		if visited == len(p.queues) {
			p.skipAhead()
			visited = 0
		}
		q := p.queues[p.cur]
		if w := q.head(); w != nil {
			if !p.credited {
				q.deficit += Quantum * q.weight
				p.credited = true
			}
			if w.charge <= q.deficit {
				return w
			}
		}
		p.cur = (p.cur + 1) % len(p.queues)
		p.credited = false
	}
}

// serving is w, the turn next returned, and the turns next would return
// after it as each is admitted, at most n in all: those behind w in its
// queue that its class's deficit still covers; or, when no other class
// waits, every one behind w (next comes back to w's queue, crediting it
// again, until it affords them). The dispatcher takes them in one call
// and then admits them through next, which returns them in this order
// unless a turn came or went in between.
func (p *pool) serving(w *waiter, n int) []*waiter {
	out := []*waiter{w}
	alone := p.n == w.q.items.Len()
	credit := w.q.deficit - w.charge
	for e := w.el.Next(); e != nil && len(out) < n; e = e.Next() {
		next := e.Value.(*waiter)
		if !alone && next.charge > credit {
			break
		}
		credit -= next.charge
		out = append(out, next)
	}
	return out
}

// skipAhead credits every waiting queue with the rounds that would pass
// before any of them can afford its head, but the last one, which next
// then plays out in order.
func (p *pool) skipAhead() {
	rounds := int64(-1)
	for _, q := range p.queues {
		if w := q.head(); w != nil {
			per := Quantum * q.weight
			r := (w.charge - q.deficit + per - 1) / per
			if rounds < 0 || r < rounds {
				rounds = r
			}
		}
	}
	if rounds <= 1 {
		return
	}
	for _, q := range p.queues {
		if q.items.Len() > 0 {
			q.deficit += (rounds - 1) * Quantum * q.weight
		}
	}
}

// drainEstimate is how long the turns waiting in p would take at the pool's
// combined limits: a guess at when a turn turned away now may fit.
func (p *pool) drainEstimate() time.Duration {
	var want Cost
	for _, q := range p.queues {
		for e := q.items.Front(); e != nil; e = e.Next() {
			w := e.Value.(*waiter)
			want.Requests += w.est.Requests
			want.Input += w.est.Input
			want.Output += w.est.Output
		}
	}
	var perMin [dims]int64
	for _, k := range p.keys {
		lim := perMinute(k.Limits)
		for d := range perMin {
			if lim[d] == 0 || perMin[d] < 0 {
				perMin[d] = -1 // some key is unlimited: no wait from d
				continue
			}
			perMin[d] += lim[d]
		}
	}
	var drain time.Duration
	for d, n := range amounts(want) {
		if perMin[d] > 0 && n > 0 {
			drain = max(drain, time.Duration(float64(n)/float64(perMin[d])*float64(time.Minute)))
		}
	}
	return drain
}
