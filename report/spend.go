package report

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
)

// By is what a spend report attributes runs to.
type By string

// The attributions of a spend report.
const (
	ByPerson By = "person"
	ByGroup  By = "group"
)

// ParseBy reads a spend report's attribution, "person" or "group".
func ParseBy(s string) (By, error) {
	switch b := By(s); b {
	case ByPerson, ByGroup:
		return b, nil
	}
	return "", fmt.Errorf("%w: by must be person or group", ErrOptions)
}

// Spender is who a run was spent by: the person who started it (from
// their sign-in token), or none for a run a virtual key started.
type Spender struct {
	Subject string   `json:"subject"`
	Label   string   `json:"label"` // the email, else the name, else the subject
	Groups  []string `json:"groups,omitempty"`
}

// SpendRun is what one run spent, and who spent it.
type SpendRun struct {
	Tenant  string
	Person  *Spender // nil: a virtual key's run
	Turns   int64
	Tokens  int64
	Dollars float64
}

// Spend is the spend report: what runs spent, attributed to the people
// who started them or to those people's groups.
type Spend struct {
	Scope Scope `json:"scope"`
	By    By    `json:"by"`
	// The totals count each run once, whatever its rows.
	Runs    int     `json:"runs"`
	Turns   int64   `json:"turns"`
	Tokens  int64   `json:"tokens"`
	Dollars float64 `json:"dollars"`
	// Rows are the attributions, most dollars first. By group, a run
	// counts in full under each of its person's groups, so the rows can
	// sum to more than the totals.
	Rows []SpendRow `json:"rows"`
}

// SpendRow is what one person, group or virtual key's tenant spent.
type SpendRow struct {
	// Kind says what the row is: "person", "group", "no_group" (people
	// whose token carried no group) or "virtual_key" (runs no person
	// started, one row per tenant).
	Kind string `json:"kind"`
	// Key is the person's subject, the group, or the tenant of a virtual
	// key row; Label is how it is shown.
	Key     string  `json:"key"`
	Label   string  `json:"label"`
	Runs    int     `json:"runs"`
	Turns   int64   `json:"turns"`
	Tokens  int64   `json:"tokens"`
	Dollars float64 `json:"dollars"`
}

// The kinds of a spend row.
const (
	RowPerson     = "person"
	RowGroup      = "group"
	RowNoGroup    = "no_group"
	RowVirtualKey = "virtual_key"
)

// BuildSpend attributes runs by by.
func BuildSpend(runs []SpendRun, by By) (Spend, error) {
	if _, err := ParseBy(string(by)); err != nil {
		return Spend{}, err
	}
	type rowKey struct{ kind, key string }
	rows := map[rowKey]*SpendRow{}
	add := func(kind, key, label string, r SpendRun) {
		k := rowKey{kind, key}
		row := rows[k]
		if row == nil {
			row = &SpendRow{Kind: kind, Key: key, Label: label}
			rows[k] = row
		}
		row.Runs++
		row.Turns += r.Turns
		row.Tokens += r.Tokens
		row.Dollars += nonNegative(r.Dollars)
	}
	s := Spend{By: by, Rows: []SpendRow{}}
	for _, r := range runs {
		s.Runs++
		s.Turns += r.Turns
		s.Tokens += r.Tokens
		s.Dollars += nonNegative(r.Dollars)
		switch p := r.Person; {
		case p == nil:
			add(RowVirtualKey, r.Tenant, "(virtual key: "+r.Tenant+")", r)
		case by == ByPerson:
			add(RowPerson, p.Subject, p.Label, r)
		case len(p.Groups) == 0:
			add(RowNoGroup, "", "(no group)", r)
		default:
			for _, g := range uniq(p.Groups) {
				add(RowGroup, g, g, r)
			}
		}
	}
	for _, row := range rows {
		s.Rows = append(s.Rows, *row)
	}
	slices.SortFunc(s.Rows, func(a, b SpendRow) int {
		if c := cmp.Compare(b.Dollars, a.Dollars); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.Label, b.Label), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Key, b.Key))
	})
	return s, nil
}

// uniq is gs without repeats, in order: a token naming a group twice
// counts the run under it once.
func uniq(gs []string) []string {
	out := make([]string, 0, len(gs))
	for _, g := range gs {
		if !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

func nonNegative(v float64) float64 {
	if !(v >= 0) || v > 1e300 {
		return 0
	}
	return v
}

// DecodeSpend reads a spend report as WriteSpendJSON writes it.
func DecodeSpend(b []byte) (Spend, error) {
	var s Spend
	if err := json.Unmarshal(b, &s); err != nil {
		return Spend{}, fmt.Errorf("report: decoding: %w", err)
	}
	if _, err := ParseBy(string(s.By)); err != nil {
		return Spend{}, errors.New("report: decoding: not a spend report")
	}
	return s, nil
}

// WriteSpendJSON writes s as indented JSON.
func WriteSpendJSON(w io.Writer, s Spend) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// WriteSpendText writes s for a person at a terminal: the totals, then a
// line per row.
func WriteSpendText(w io.Writer, s Spend) error {
	var b strings.Builder
	fmt.Fprintf(&b, "spend by %s: %d runs, %d turns, %d tokens, $%s%s\n", s.By, s.Runs, s.Turns, s.Tokens, dollars(s.Dollars), scopeText(s.Scope))
	if s.By == ByGroup {
		b.WriteString("a run counts in full under each group of the person who started it, so the rows may add up to more than the total\n")
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\n%s\truns\tturns\ttokens\tdollars\n", s.By)
	for _, r := range s.Rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t$%s\n", printable(r.Label), r.Runs, r.Turns, r.Tokens, dollars(r.Dollars))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if s.Scope.Truncated {
		fmt.Fprintf(&b, "\nnote: the scan stopped at its bound after %d records; older runs are not counted (narrow it with --since or --tenant)\n", s.Scope.Scanned)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// printable is s with its control characters (a name from a token may
// hold a tab or an escape sequence) shown as '?'.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}

func dollars(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }
