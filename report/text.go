package report

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteText writes rep for a person at a terminal: what the figures mean,
// then per class a line per dimension (knee, ceiling, interval, the runs
// it rests on) and each curve as budget: share pairs.
func WriteText(w io.Writer, rep Report) error {
	o := rep.Options
	var b strings.Builder
	fmt.Fprintf(&b, "cost-vs-success report: %d runs%s\n", rep.Runs, scopeText(rep.Scope))
	fmt.Fprintf(&b, "F(b): share of the class's judged runs that were accepted and finished within budget b\n")
	fmt.Fprintf(&b, "knee: smallest b from which F rises by less than %s per grid step\n", percent(o.Slope))
	fmt.Fprintf(&b, "ceiling: smallest b within which %s of the accepted runs finished; %s bootstrap interval, %d resamples, seed %d\n",
		percent(o.Quantile), percent(o.Level), o.Resamples, o.Seed)
	for _, c := range rep.Classes {
		fmt.Fprintf(&b, "\nclass %s: %d runs, %d accepted (%s)\n", className(c.Class), c.Runs, c.Accepted, percent(fraction(c.Accepted, c.Runs)))
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  dimension\tknee\tF(knee)\tceiling\tinterval\trests on")
		for _, cv := range c.Curves {
			ceil, iv, on := "-", "-", "no accepted run"
			if cv.Ceiling != nil {
				ceil = cv.amount(cv.Ceiling.Value)
				iv = "[" + cv.number(cv.Ceiling.Low) + ", " + cv.number(cv.Ceiling.High) + "]"
				on = strconv.Itoa(cv.Ceiling.Runs) + " accepted runs"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", cv.Dimension, cv.amount(cv.Knee.Budget), percent(cv.Knee.Fraction), ceil, iv, on)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, cv := range c.Curves {
			fmt.Fprintf(&b, "  F(%s):", cv.Unit)
			for _, p := range cv.Points {
				fmt.Fprintf(&b, " %s:%.0f%%", cv.number(p.Budget), 100*p.Fraction)
			}
			b.WriteByte('\n')
		}
	}
	if rep.Scope.Truncated {
		fmt.Fprintf(&b, "\nnote: the scan stopped at its bound after %d records; older runs are not counted (narrow it with --since or --tenant)\n", rep.Scope.Scanned)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func scopeText(s Scope) string {
	var parts []string
	if s.Tenant != "" {
		parts = append(parts, "tenant "+s.Tenant)
	}
	if s.Class != "" {
		parts = append(parts, "class "+s.Class)
	}
	if s.Since != "" {
		parts = append(parts, "since "+s.Since)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
