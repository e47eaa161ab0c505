package ratelimit

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

// newTestPool is a pool of the default classes.
func newTestPool() *pool {
	s := New(Options{Buckets: NewMemory(nil)})
	s.Close()
	return newPool("p", nil, s.classes, s.weights)
}

func pushN(p *pool, class string, n int, charge int64) {
	for range n {
		p.push(&waiter{class: class, charge: charge}, t0)
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
		p.admit(w, t0)
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
// it keeps at most one round's for creditGrace, for turns that come back
// at once, and nothing after.
func TestDRRDeficitReset(t *testing.T) {
	p := newTestPool()
	q := p.class[Interactive]
	pushN(p, Interactive, 1, 100)
	w := p.next()
	if w == nil || w.class != Interactive {
		t.Fatalf("next = %+v, want the interactive turn", w)
	}
	if q.deficit != 4000 {
		t.Fatalf("deficit %d after one credit, want 4000", q.deficit)
	}
	p.admit(w, t0)
	if q.deficit != 3900 {
		t.Fatalf("deficit %d after serving 100 of 4000, want 3900 kept for a moment", q.deficit)
	}
	// Back within the grace: the credit is still there.
	p.push(&waiter{class: Interactive, charge: 100}, t0.Add(creditGrace))
	if q.deficit != 3900 {
		t.Fatalf("a turn back within the grace found deficit %d, want 3900", q.deficit)
	}
	p.admit(p.next(), t0.Add(creditGrace))
	// Back after it: nothing banked.
	p.push(&waiter{class: Interactive, charge: 100}, t0.Add(2*creditGrace+time.Millisecond))
	if q.deficit != 0 {
		t.Fatalf("a turn back after a long absence found deficit %d, want 0", q.deficit)
	}
	p.remove(q.head(), t0)

	// Never more than one round's credit is kept.
	pushN(p, Batch, 1, 50000)
	pushN(p, Interactive, 1, 250000)
	if w := p.next(); w.class != Batch {
		t.Fatalf("next = %s, want batch", w.class)
	}
	if d := q.deficit; d < 196000 {
		t.Fatalf("interactive deficit %d after about 50 rounds, want 196000 or more", d)
	}
	p.remove(q.head(), t0)
	if d := q.deficit; d != 4000 {
		t.Fatalf("an emptied queue kept a deficit of %d, want at most one round's (4000)", d)
	}

	// The same when the last turn leaves without being served, and a
	// class away for long starts from nothing.
	pushN(p, Standard, 2, 100)
	p.remove(p.class[Standard].head(), t0)
	p.remove(p.class[Standard].head(), t0)
	p.push(&waiter{class: Standard, charge: 100}, t0.Add(time.Minute))
	if d := p.class[Standard].deficit; d != 0 {
		t.Fatalf("a class back after a minute found deficit %d", d)
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

// TestDRRServing: the turns serving lists are those next then returns,
// in order, as each is admitted: within the class's credit when other
// classes wait, every one behind the first when none does.
func TestDRRServing(t *testing.T) {
	tests := []struct {
		name string
		fill func(p *pool)
		want int // how many serving lists, at most 64
	}{
		{"one class", func(p *pool) { pushN(p, Standard, 100, 700) }, 64},
		{"one class of large turns", func(p *pool) { pushN(p, Batch, 10, 5000) }, 10},
		{"three classes", func(p *pool) {
			pushN(p, Interactive, 10, 300)
			pushN(p, Standard, 10, 700)
			pushN(p, Batch, 10, 300)
		}, 0},
		{"uneven turns", func(p *pool) {
			for i := range 20 {
				p.push(&waiter{class: Standard, charge: int64(100 + 400*(i%3))}, t0)
				p.push(&waiter{class: Interactive, charge: int64(900 - 300*(i%2))}, t0)
			}
		}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPool()
			tc.fill(p)
			first := true
			for p.n > 0 {
				w := p.next()
				ws := p.serving(w, 64)
				if first && tc.want > 0 && len(ws) != tc.want {
					t.Fatalf("serving %d turns, want %d", len(ws), tc.want)
				}
				first = false
				for i, sw := range ws {
					got := p.next()
					if got != sw {
						t.Fatalf("serving's turn %d is not the one next returns", i)
					}
					p.admit(got, t0)
				}
			}
		})
	}
}
