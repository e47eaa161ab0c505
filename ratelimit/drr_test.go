package ratelimit

import (
	"strings"
	"testing"
)

// newTestPool is a pool of the default classes.
func newTestPool() *pool {
	s := New(Options{Buckets: NewMemory(nil)})
	s.Close()
	return newPool("p", nil, s.classes, s.weights)
}

func pushN(p *pool, class string, n int, charge int64) {
	for range n {
		p.push(&waiter{class: class, charge: charge})
	}
}

// serveOrder admits the turns next chooses until the pool is empty, at most
// limit, and returns their classes' initials.
func serveOrder(t *testing.T, p *pool, limit int) string {
	t.Helper()
	var b strings.Builder
	for range limit {
		w := p.next()
		if w == nil {
			return b.String()
		}
		b.WriteByte(w.class[0])
		p.admit(w)
	}
	t.Fatalf("pool not empty after %d admissions: %s...", limit, b.String())
	return ""
}

func TestDRROrder(t *testing.T) {
	tests := []struct {
		name  string
		fill  func(p *pool)
		order string
	}{
		{
			// Per round: interactive 4000, standard 2000, batch 1000.
			name: "equal turns follow the weights",
			fill: func(p *pool) {
				pushN(p, Interactive, 6, 1000)
				pushN(p, Standard, 6, 1000)
				pushN(p, Batch, 6, 1000)
			},
			order: "iiiissb" + "iissb" + "ssb" + "bbb",
		},
		{
			// One batch turn of 5000 takes five rounds of batch
			// credit; the small interactive turns go meanwhile.
			name: "a large batch turn does not hold small interactive ones",
			fill: func(p *pool) {
				pushN(p, Batch, 1, 5000)
				pushN(p, Interactive, 30, 500)
			},
			order: "iiiiiiii" + "iiiiiiii" + "iiiiiiii" + "iiiiii" + "b",
		},
		{
			name: "a lone class is served alone",
			fill: func(p *pool) {
				pushN(p, Batch, 3, 200000)
			},
			order: "bbb",
		},
		{
			// Interactive turns larger than a round's credit still
			// come four times as often as batch turns of the same size.
			name: "turns larger than a quantum",
			fill: func(p *pool) {
				pushN(p, Interactive, 8, 3000)
				pushN(p, Batch, 3, 3000)
			},
			order: "iiiib" + "iiiib" + "b",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPool()
			tc.fill(p)
			if got := serveOrder(t, p, 1000); got != tc.order {
				t.Fatalf("order %s, want %s", got, tc.order)
			}
		})
	}
}

// TestDRRDeficitReset checks that a queue that empties loses its credit:
// a class that was away banks nothing for its return.
func TestDRRDeficitReset(t *testing.T) {
	p := newTestPool()
	pushN(p, Interactive, 1, 100)
	w := p.next()
	if w == nil || w.class != Interactive {
		t.Fatalf("next = %+v, want the interactive turn", w)
	}
	q := p.class[Interactive]
	if q.deficit != 4000 {
		t.Fatalf("deficit %d after one credit, want 4000", q.deficit)
	}
	p.admit(w)
	if q.deficit != 0 {
		t.Fatalf("an emptied queue kept a deficit of %d", q.deficit)
	}

	// The same when the last turn leaves without being served.
	pushN(p, Standard, 2, 100)
	w = p.next()
	p.remove(w)
	p.remove(p.class[Standard].head())
	if d := p.class[Standard].deficit; d != 0 {
		t.Fatalf("a queue emptied by departures kept a deficit of %d", d)
	}

	// After a long wait alone, batch's credit is its own affair: the
	// interactive class arriving later starts from nothing and is served
	// per the weights.
	pushN(p, Batch, 2, 50000)
	if w := p.next(); w.class != Batch {
		t.Fatalf("next = %s, want batch", w.class)
	}
	if d := p.class[Interactive].deficit; d != 0 {
		t.Fatalf("an empty interactive queue was credited %d while batch waited", d)
	}
}

// TestDRRSkipAhead checks that rounds in which nobody can afford a turn
// are skipped arithmetically and still credit every class per its weight.
func TestDRRSkipAhead(t *testing.T) {
	p := newTestPool()
	pushN(p, Batch, 1, 100000)
	pushN(p, Interactive, 1, 1000000)
	w := p.next()
	if w.class != Batch {
		t.Fatalf("next = %s, want batch (100 rounds, against 250 for interactive)", w.class)
	}
	if b := p.class[Batch].deficit; b != 100000 {
		t.Fatalf("batch deficit %d, want 100000", b)
	}
	if i := p.class[Interactive].deficit; i != 400000 {
		t.Fatalf("interactive deficit %d after 100 rounds, want 400000", i)
	}
}
