package report

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
)

// Dimension is a budget dimension a curve is drawn over.
type Dimension string

// The dimensions of a trajectory's budget.
const (
	Turns   Dimension = "turns"
	Tokens  Dimension = "tokens"
	Seconds Dimension = "seconds"
	Dollars Dimension = "dollars"
)

// Dimensions returns every dimension in report order.
func Dimensions() []Dimension { return []Dimension{Turns, Tokens, Seconds, Dollars} }

// Unit is what an axis of d is labelled with.
func (d Dimension) Unit() string {
	switch d {
	case Seconds:
		return "s"
	case Dollars:
		return "USD"
	}
	return string(d)
}

// integral reports whether d counts whole things, so its grid steps are
// whole numbers too.
func (d Dimension) integral() bool { return d == Turns || d == Tokens }

// Run is one finished run that was judged: what it was, whether its work
// was accepted, and what it spent.
type Run struct {
	Tenant   string  `json:"tenant"`
	Class    string  `json:"class"`
	Accepted bool    `json:"accepted"`
	Turns    int64   `json:"turns"`
	Tokens   int64   `json:"tokens"` // input (cached and cache writes included) plus output
	Seconds  float64 `json:"seconds"`
	Dollars  float64 `json:"dollars"`
}

// Cost is what r spent in d. A value that is negative or not finite (no
// store writes one) counts as 0 rather than breaking the grid.
func (r Run) Cost(d Dimension) float64 {
	var v float64
	switch d {
	case Turns:
		v = float64(r.Turns)
	case Tokens:
		v = float64(r.Tokens)
	case Seconds:
		v = r.Seconds
	case Dollars:
		v = r.Dollars
	}
	if !(v >= 0) || math.IsInf(v, 1) {
		return 0
	}
	return v
}

// Options tune a report. Zero fields take DefaultOptions' values.
type Options struct {
	// Buckets is the most grid points a curve has past 0; the step is the
	// smallest of 1, 2 or 5 times a power of ten that covers the largest
	// cost in that many steps.
	Buckets int `json:"buckets"`
	// Slope defines the knee: the smallest budget on the grid from which
	// the curve never rises by Slope or more per bucket (a fraction of
	// runs: 0.01 is one percentage point).
	Slope float64 `json:"slope"`
	// Quantile defines the suggested ceiling: the smallest budget within
	// which that share of the accepted runs finished.
	Quantile float64 `json:"quantile"`
	// Level is the confidence of the ceiling's bootstrap interval.
	Level float64 `json:"level"`
	// Resamples is the number of bootstrap resamples.
	Resamples int `json:"resamples"`
	// Seed makes the bootstrap repeatable: the same runs and options give
	// the same interval.
	Seed uint64 `json:"seed"`
}

// DefaultOptions are what a zero Options field means.
func DefaultOptions() Options {
	return Options{Buckets: 20, Slope: 0.02, Quantile: 0.95, Level: 0.95, Resamples: 1000, Seed: 1}
}

// ErrOptions is an option out of its range.
var ErrOptions = errors.New("report: invalid options")

func (o Options) withDefaults() (Options, error) {
	d := DefaultOptions()
	if o.Buckets == 0 {
		o.Buckets = d.Buckets
	}
	if o.Slope == 0 {
		o.Slope = d.Slope
	}
	if o.Quantile == 0 {
		o.Quantile = d.Quantile
	}
	if o.Level == 0 {
		o.Level = d.Level
	}
	if o.Resamples == 0 {
		o.Resamples = d.Resamples
	}
	if o.Seed == 0 {
		o.Seed = d.Seed
	}
	switch {
	case o.Buckets < 1 || o.Buckets > 1000:
		return o, fmt.Errorf("%w: buckets must be 1..1000", ErrOptions)
	case !(o.Slope > 0 && o.Slope <= 1):
		return o, fmt.Errorf("%w: slope must be in (0, 1]", ErrOptions)
	case !(o.Quantile > 0 && o.Quantile <= 1):
		return o, fmt.Errorf("%w: quantile must be in (0, 1]", ErrOptions)
	case !(o.Level > 0 && o.Level < 1):
		return o, fmt.Errorf("%w: level must be in (0, 1)", ErrOptions)
	case o.Resamples < 10 || o.Resamples > 100000:
		return o, fmt.Errorf("%w: resamples must be 10..100000", ErrOptions)
	}
	return o, nil
}

// Scope says which runs a report was built from; Build leaves it to the
// caller, who chose them.
type Scope struct {
	Tenant string `json:"tenant,omitempty"`
	Class  string `json:"class,omitempty"`
	Since  string `json:"since,omitempty"`
	// Scanned is how many records were read to find the runs, and
	// Truncated is set when the reader stopped at its bound before the
	// runs the scope asks for ran out.
	Scanned   int  `json:"scanned,omitempty"`
	Truncated bool `json:"truncated,omitempty"`
}

// Report is the cost-vs-success report of a set of runs.
type Report struct {
	Scope   Scope   `json:"scope"`
	Options Options `json:"options"`
	Runs    int     `json:"runs"`
	Classes []Class `json:"classes"`
}

// Class is the report of one task class.
type Class struct {
	Class    string  `json:"class"` // "" for runs marked without a class
	Runs     int     `json:"runs"`
	Accepted int     `json:"accepted"`
	Curves   []Curve `json:"curves"`
}

// Curve is F over one dimension: F(b) is the share of the class's runs
// that were accepted and finished within budget b.
//
// The denominator is every judged run of the class, accepted or not, not
// only the accepted ones. A ceiling b stops every run that needs more, so
// F(b) is the success rate an operator would have had with that ceiling:
// it rises to the class's acceptance rate and no further. Dividing by the
// accepted runs instead would always reach 1 and hide the point the seed
// asks for, where more budget stops buying successes.
type Curve struct {
	Dimension Dimension `json:"dimension"`
	Unit      string    `json:"unit"`
	Step      float64   `json:"step"`
	Points    []Point   `json:"points"`
	Knee      Point     `json:"knee"`
	// Ceiling is nil when the class has no accepted run to rest it on.
	Ceiling *Ceiling `json:"ceiling"`
}

// Point is F at one budget of the grid.
type Point struct {
	Budget   float64 `json:"budget"`
	Accepted int     `json:"accepted_within"`
	Fraction float64 `json:"fraction"`
}

// Ceiling is a suggested budget ceiling: the smallest budget within which
// Quantile of the class's accepted runs finished, the Runs it rests on
// (the accepted runs), and a percentile bootstrap interval at Level.
type Ceiling struct {
	Value float64 `json:"value"`
	Low   float64 `json:"low"`
	High  float64 `json:"high"`
	Level float64 `json:"level"`
	Runs  int     `json:"runs"`
}

// Build computes the report of runs, one Class per task class in name
// order. Options left zero take their defaults.
func Build(runs []Run, opts Options) (Report, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return Report{}, err
	}
	byClass := map[string][]Run{}
	for _, r := range runs {
		byClass[r.Class] = append(byClass[r.Class], r)
	}
	rep := Report{Options: opts, Runs: len(runs), Classes: []Class{}}
	for _, name := range slices.Sorted(maps.Keys(byClass)) {
		rs := byClass[name]
		c := Class{Class: name, Runs: len(rs)}
		for _, r := range rs {
			if r.Accepted {
				c.Accepted++
			}
		}
		for _, d := range Dimensions() {
			c.Curves = append(c.Curves, curve(rs, d, opts, name))
		}
		rep.Classes = append(rep.Classes, c)
	}
	return rep, nil
}

// Decode reads a report as WriteJSON writes it (the admin API's answer).
func Decode(b []byte) (Report, error) {
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return Report{}, fmt.Errorf("report: decoding: %w", err)
	}
	return r, nil
}

// WriteJSON writes rep as indented JSON.
func WriteJSON(w io.Writer, rep Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// sortedCosts returns the costs of the accepted runs in d, ascending.
func sortedCosts(rs []Run, d Dimension) []float64 {
	var xs []float64
	for _, r := range rs {
		if r.Accepted {
			xs = append(xs, r.Cost(d))
		}
	}
	slices.SortFunc(xs, cmp.Compare[float64])
	return xs
}
