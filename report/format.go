package report

import (
	"math"
	"strconv"
)

// decimals is how many decimals a value on a grid of step s needs.
func decimals(s float64) int {
	if s <= 0 || s >= 1 {
		return 0
	}
	return int(math.Ceil(-math.Log10(s) - 1e-9))
}

// number writes v with the decimals its curve's grid needs.
func (c Curve) number(v float64) string {
	d := decimals(c.Step)
	if c.Dimension == Dollars {
		d = max(d, 2) // cents
	}
	return strconv.FormatFloat(v, 'f', d, 64)
}

// amount writes v with its unit: "12 turns", "$0.40", "90 s".
func (c Curve) amount(v float64) string {
	switch c.Dimension {
	case Dollars:
		return "$" + c.number(v)
	case Seconds:
		return c.number(v) + " s"
	}
	return c.number(v) + " " + c.Unit
}

func percent(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }

// className is how a class is shown: runs marked without one are "(none)".
func className(c string) string {
	if c == "" {
		return "(none)"
	}
	return c
}
