package report

import (
	"encoding/csv"
	"io"
	"strconv"
)

// WriteCSV writes rep as one long table: a "curve" row per grid point and
// a "knee" row per curve, with the share of runs accepted within the
// budget, then "ceiling", "ceiling_low" and "ceiling_high" rows with the
// number of accepted runs the ceiling rests on, so that a spreadsheet can
// filter on the kind column.
func WriteCSV(w io.Writer, rep Report) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"class", "dimension", "unit", "kind", "budget", "accepted_within", "runs", "fraction", "rests_on"})
	for _, cl := range rep.Classes {
		for _, cv := range cl.Curves {
			point := func(kind string, p Point) {
				_ = cw.Write([]string{cl.Class, string(cv.Dimension), cv.Unit, kind, cv.number(p.Budget),
					strconv.Itoa(p.Accepted), strconv.Itoa(cl.Runs), strconv.FormatFloat(p.Fraction, 'f', 4, 64), ""})
			}
			for _, p := range cv.Points {
				point("curve", p)
			}
			point("knee", cv.Knee)
			if c := cv.Ceiling; c != nil {
				for _, k := range []struct {
					kind string
					v    float64
				}{{"ceiling", c.Value}, {"ceiling_low", c.Low}, {"ceiling_high", c.High}} {
					_ = cw.Write([]string{cl.Class, string(cv.Dimension), cv.Unit, k.kind, cv.number(k.v),
						"", strconv.Itoa(cl.Runs), "", strconv.Itoa(c.Runs)})
				}
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
