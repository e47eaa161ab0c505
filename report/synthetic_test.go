package report

import (
	"math"
	"math/rand/v2"
)

// population is a synthetic task class with a known curve. A run's size s
// (its cost in dollars) is exponential with mean Mean; it is accepted with
// probability P0·e^(-s/Lambda): bigger tasks fail more often. Then
//
//	F(b) = A·(1 - e^(-k·b)), with k = 1/Mean + 1/Lambda, A = P0·k'/k, k' = 1/Mean
//
// and the accepted runs' costs are exponential with rate k, so their
// q-quantile is -ln(1-q)/k. The other dimensions are increasing functions
// of s, as a run's turns, tokens and time are of its size.
type population struct {
	Class            string
	Mean, P0, Lambda float64
}

func (p population) rate() float64 { return 1/p.Mean + 1/p.Lambda }

// F is the true share of runs accepted within b dollars.
func (p population) F(b float64) float64 {
	return p.P0 * (1 / p.Mean) / p.rate() * (1 - math.Exp(-p.rate()*b))
}

// Quantile is the true q-quantile of the accepted runs' dollars.
func (p population) Quantile(q float64) float64 { return -math.Log(1-q) / p.rate() }

func (p population) draw(rng *rand.Rand, n int, tenant string) []Run {
	rs := make([]Run, n)
	for i := range rs {
		s := rng.ExpFloat64() * p.Mean
		rs[i] = Run{
			Tenant:   tenant,
			Class:    p.Class,
			Accepted: rng.Float64() < p.P0*math.Exp(-s/p.Lambda),
			Dollars:  s,
			Turns:    2 + int64(math.Round(s*25)),
			Tokens:   5000 + int64(math.Round(s*180000)),
			Seconds:  20 + s*400,
		}
	}
	return rs
}

// example is the worked example's population (testdata/runs.jsonl).
func example() []Run {
	rng := rand.New(rand.NewPCG(2026, 12))
	var rs []Run
	for i, p := range []population{
		{Class: "bugfix", Mean: 0.6, P0: 0.9, Lambda: 3},
		{Class: "docs", Mean: 0.2, P0: 0.95, Lambda: 2},
		{Class: "feature", Mean: 1.5, P0: 0.8, Lambda: 4},
	} {
		for _, r := range p.draw(rng, 40, []string{"team-a", "team-b"}[i%2]) {
			// As the store keeps them: micro-dollars, whole milliseconds.
			r.Dollars = math.Round(r.Dollars*1e6) / 1e6
			r.Seconds = math.Round(r.Seconds*1e3) / 1e3
			rs = append(rs, r)
		}
	}
	return rs
}
