package meter

import (
	"math"

	"gatekeeper/trajectory"
)

// Charge is what one turn cost.
type Charge struct {
	Micros int64 // 1e-6 USD, rounded to the nearest
	// Priced is false when the model is unknown and the fallback price was
	// charged; the record flags such a charge.
	Priced bool
	// Model is the table key that priced the turn ("claude-sonnet-4-5" for
	// "claude-sonnet-4-5-20250929"); empty when the fallback did.
	Model string
	// LongPrompt is set when the prompt was long enough for the model's
	// long-prompt rates.
	LongPrompt bool
}

// Dollars is the charge in USD, as the record carries it.
func (c Charge) Dollars() float64 { return ToDollars(c.Micros) }

// Cost prices one turn: uncached input × input price + cache reads × cached
// price + cache writes × write price (the 1-hour ones at the 1-hour price) +
// output (reasoning included) × output price, times the multiplier of the
// service tier the reply reports (Tier). An unknown model is charged
// the fallback price, never zero. Negative counts, which no provider sends,
// count as zero rather than as a refund.
func (t *Table) Cost(model string, u trajectory.Usage) Charge {
	e, ok := t.find(model)
	if !ok {
		e = t.fallback
	}
	in, cached, write, out := nonNeg(u.InputTokens), nonNeg(u.CachedInputTokens), nonNeg(u.CacheWriteTokens), nonNeg(u.OutputTokens)
	hour := min(nonNeg(u.CacheWrite1hTokens), write)
	r, long := e.ratesFor(addSat(addSat(in, cached), write))
	p := mulSat(in, r.input)
	p = addSat(p, mulSat(cached, r.cached))
	p = addSat(p, mulSat(write-hour, r.write))
	p = addSat(p, mulSat(hour, r.write1h))
	p = addSat(p, mulSat(out, r.output))
	if x := t.Tier(model, u.ServiceTier); x != 1000 {
		p = mulSat(p/1000, x) + (p%1000)*x/1000
	}
	return Charge{Micros: picosToMicros(p, false), Priced: ok, Model: e.key, LongPrompt: long}
}

// ApproxTokens estimates the tokens of n bytes of text or JSON at four bytes
// a token, rounded up: the estimate for a request not yet counted by the
// provider or a stream cut before its usage arrived.
func ApproxTokens(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return n/4 + min(n%4, 1)
}

// Estimate is the reservation for a call about to start with maxOutput as
// its output limit: Worst(model, inputBytes).Reservation(maxOutput).
func (t *Table) Estimate(model string, inputBytes, maxOutput int64) Reservation {
	return t.Worst(model, inputBytes).Reservation(maxOutput)
}

// ToDollars converts micro-dollars to USD.
func ToDollars(micros int64) float64 { return float64(micros) / 1e6 }

// FromDollars converts USD to micro-dollars, rounded to the nearest; NaN and
// negative amounts are zero, amounts past int64 saturate.
func FromDollars(usd float64) int64 {
	m := math.Round(usd * 1e6)
	switch {
	case !(m > 0):
		return 0
	case m >= math.MaxInt64:
		return math.MaxInt64
	}
	return int64(m)
}

// picosToMicros rounds pico-dollars to micro-dollars: half up for charges,
// always up for reservations, which must not undershoot.
func picosToMicros(p int64, up bool) int64 {
	q, r := p/1_000_000, p%1_000_000
	if (up && r > 0) || r >= 500_000 {
		q++
	}
	return q
}

func nonNeg(n int64) int64 { return max(n, 0) }

// mulSat and addSat saturate at MaxInt64 instead of wrapping to a negative
// charge; both take non-negative operands.
func mulSat(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
