package report

import (
	"hash/fnv"
	"math"
	"math/bits"
	"slices"
)

// step is a grid step: mant × 10^exp, mant one of 1, 2, 5. Grid budgets are
// computed from the integers so that 3 × 0.1 is the 0.3 a cost is compared
// with, not 0.30000000000000004's neighbour below it.
type step struct {
	mant, exp int
}

func (s step) at(i int) float64 {
	if s.exp >= 0 {
		return float64(i*s.mant) * math.Pow10(s.exp)
	}
	return float64(i*s.mant) / math.Pow10(-s.exp)
}

func (s step) value() float64 { return s.at(1) }

// gridStep is the smallest 1, 2 or 5 × 10^n that covers hi in at most n
// steps; whole numbers only for integral dimensions.
func gridStep(hi float64, n int, integral bool) step {
	if hi <= 0 {
		return step{1, 0}
	}
	raw := hi / float64(n)
	exp := int(math.Floor(math.Log10(raw)))
	if integral && exp < 0 {
		exp = 0
	}
	for {
		for _, m := range []int{1, 2, 5} {
			s := step{m, exp}
			if s.at(n) >= hi {
				return s
			}
		}
		exp++
	}
}

// curve computes one dimension's curve, knee and ceiling for the runs of
// one class.
func curve(rs []Run, d Dimension, o Options, class string) Curve {
	acc := sortedCosts(rs, d)
	var hi float64
	for _, r := range rs {
		hi = max(hi, r.Cost(d))
	}
	st := gridStep(hi, o.Buckets, d.integral())
	n := int(math.Ceil(hi/st.value() - 1e-9))
	n = max(n, 1)
	c := Curve{Dimension: d, Unit: d.Unit(), Step: st.value(), Points: make([]Point, 0, n+1)}
	j := 0
	for i := 0; i <= n; i++ {
		b := st.at(i)
		for j < len(acc) && acc[j] <= b {
			j++
		}
		c.Points = append(c.Points, Point{Budget: b, Accepted: j, Fraction: fraction(j, len(rs))})
	}
	c.Knee = c.Points[knee(c.Points, o.Slope)]
	if len(acc) > 0 {
		c.Ceiling = ceiling(acc, o, seedFor(o.Seed, class, d))
	}
	return c
}

func fraction(k, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(k) / float64(n)
}

// knee returns the index of the smallest budget from which the curve rises
// by less than slope per bucket to every later point. Comparing with every
// later point, not only the next, keeps a flat stretch before a late rise
// from passing for the knee.
func knee(ps []Point, slope float64) int {
	for i := range ps {
		ok := true
		for j := i + 1; j < len(ps) && ok; j++ {
			ok = ps[j].Fraction-ps[i].Fraction < slope*float64(j-i)
		}
		if ok {
			return i
		}
	}
	return len(ps) - 1
}

// quantileIndex is the index in n sorted values of the q-quantile: the
// smallest value at or below which at least q of them lie, a cost some run
// actually had.
func quantileIndex(n int, q float64) int {
	k := int(math.Ceil(q*float64(n) - 1e-9))
	return min(max(k, 1), n) - 1
}

// ceiling is the q-quantile of the accepted costs acc (ascending) and its
// percentile bootstrap interval. Each resample draws len(acc) indices with
// replacement and counts them, so its quantile is found by walking the
// counts of the already sorted costs instead of sorting every resample.
func ceiling(acc []float64, o Options, seed uint64) *Ceiling {
	n := len(acc)
	k := quantileIndex(n, o.Quantile) + 1 // the k-th smallest
	rng := splitmix{seed}
	counts := make([]int, n)
	reps := make([]float64, o.Resamples)
	for r := range reps {
		clear(counts)
		for range n {
			counts[rng.intn(n)]++
		}
		seen := 0
		for i, c := range counts {
			seen += c
			if seen >= k {
				reps[r] = acc[i]
				break
			}
		}
	}
	slices.Sort(reps)
	tail := (1 - o.Level) / 2
	lo := int(math.Floor(tail * float64(len(reps))))
	hi := int(math.Ceil((1-tail)*float64(len(reps)))) - 1
	return &Ceiling{Value: acc[k-1], Low: reps[min(lo, len(reps)-1)], High: reps[max(hi, 0)], Level: o.Level, Runs: n}
}

// seedFor gives each class and dimension its own stream, so that a report
// filtered to one class shows the same interval as the full one.
func seedFor(seed uint64, class string, d Dimension) uint64 {
	h := fnv.New64a()
	h.Write([]byte(class))
	h.Write([]byte{0})
	h.Write([]byte(d))
	return seed ^ h.Sum64()
}

// splitmix is SplitMix64: small, fast and fully determined by its seed,
// which is all a repeatable bootstrap needs (math/rand is state this
// package does not hold).
type splitmix struct{ s uint64 }

func (r *splitmix) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intn returns a number in [0, n) by Lemire's multiply-shift; its bias,
// below n/2^64, is far under what a bootstrap can see.
func (r *splitmix) intn(n int) int {
	hi, _ := bits.Mul64(r.next(), uint64(n))
	return int(hi)
}
