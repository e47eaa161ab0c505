// Package report owns the cost-vs-success report: from finished runs
// judged accepted or rejected, per task class and per budget dimension
// (turns, tokens, seconds, dollars), the curve of the share of runs that
// were accepted within a budget, its knee, and a suggested ceiling with a
// bootstrap interval; and the report's text, JSON, CSV and SVG forms. It is
// pure: it reads no store and writes only to the io.Writer it is given.
package report
