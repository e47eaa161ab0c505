package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	rulesFile     = "prometheus/gatekeeper.rules.yaml"
	rulesTestFile = "prometheus/gatekeeper.test.yaml"
	dashboardFile = "prometheus/gatekeeper.dashboard.json"
	alertsDoc     = "../docs/operations/alerts.md"
)

// rule is one alert of the rules file.
type rule struct {
	Alert string `yaml:"alert"`
	Expr  string `yaml:"expr"`
}

func rules(t *testing.T) []rule {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatal("no rules")
	}
	return out
}

// query is one PromQL expression of the dashboard, named for messages.
type query struct{ where, expr string }

// dashboardQueries are the dashboard's panel targets and its template
// variables' queries.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	var out []query
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, query{"panel " + p.Title, tg.Expr})
		}
	}
	labelValues := regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)["query"].(string)
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(metric, label)", v.Name, q)
		}
		out = append(out, query{"variable " + v.Name, m[1]})
	}
	if len(out) < 10 {
		t.Fatalf("only %d dashboard queries", len(out))
	}
	return out
}

// promqlWords are the PromQL functions, aggregations and keywords the
// files may use; any other word in an expression is a metric name.
var promqlWords = []string{
	"sum", "min", "max", "avg", "count", "topk", "bottomk", "quantile", "stddev",
	"rate", "irate", "increase", "delta", "deriv", "histogram_quantile",
	"min_over_time", "max_over_time", "avg_over_time", "sum_over_time", "absent", "absent_over_time",
	"clamp_min", "clamp_max", "abs", "time", "vector", "scalar",
	"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
}

var (
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGroups   = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlVars     = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)
	promqlWord     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promqlNumber   = regexp.MustCompile(`\b[0-9][0-9.eE+-]*[a-z]*\b`)
)

// metricNames are the metric names an expression selects: what is left
// of it without strings, label matchers, ranges, grouping clauses,
// dashboard variables, numbers, functions and keywords.
func metricNames(expr string) []string {
	s := promqlStrings.ReplaceAllString(expr, " ")
	s = promqlMatchers.ReplaceAllString(s, " ")
	s = promqlRanges.ReplaceAllString(s, " ")
	s = promqlGroups.ReplaceAllString(s, " ")
	s = promqlVars.ReplaceAllString(s, " ")
	s = promqlNumber.ReplaceAllString(s, " ")
	var out []string
	for _, w := range promqlWord.FindAllString(s, -1) {
		if !slices.Contains(promqlWords, w) && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

func TestMetricNames(t *testing.T) {
	cases := []struct {
		name, expr string
		want       []string
	}{
		{"selector", `gatekeeper_approvals_pending`, []string{"gatekeeper_approvals_pending"}},
		{"grouped rate with a matcher", `sum by (tenant) (increase(gatekeeper_refusals_total{reason="budget_exceeded", tenant=~"a|b"}[15m])) > 5`,
			[]string{"gatekeeper_refusals_total"}},
		{"ratio", "sum by (provider) (rate(a_total[5m]))\n / sum by (provider) (rate(b_total[5m])) > 0.05", []string{"a_total", "b_total"}},
		{"quantile with variables", `histogram_quantile(0.95, sum by (le, class) (rate(x_bucket{job=~"$job"}[$__rate_interval])))`, []string{"x_bucket"}},
		{"scaled", `max(g_seconds) / 60 * 1e3`, []string{"g_seconds"}},
		{"a label outside a matcher is a name", `sum(tenant)`, []string{"tenant"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := metricNames(c.expr); !slices.Equal(got, c.want) {
				t.Errorf("metricNames(%q) = %q, want %q", c.expr, got, c.want)
			}
		})
	}
}

// TestRulesChecked: promtool accepts the rules, their unit tests pass
// (each alert fires on the series it watches and stays quiet below its
// threshold), every alert has such a test and a section in the alerts
// documentation.
func TestRulesChecked(t *testing.T) {
	rs := rules(t)
	tests, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(alertsDoc)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Alert == "" {
			t.Errorf("a rule without an alert name: %q", r.Expr)
			continue
		}
		if !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") {
			t.Errorf("%s has no test in %s", r.Alert, rulesTestFile)
		}
		if !strings.Contains(string(doc), "## "+r.Alert+"\n") {
			t.Errorf("%s has no section (## %s) in %s", r.Alert, r.Alert, alertsDoc)
		}
	}
	promtool := tool(t, "promtool", "prometheus")
	files, err := filepath.Glob("prometheus/*.rules.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no rules files (%v)", err)
	}
	runTool(t, ".", nil, promtool, append([]string{"check", "rules"}, files...)...)
	runTool(t, ".", nil, promtool, "test", "rules", rulesTestFile)
}

// TestDashboardQueriesParse: promtool parses every dashboard query, with
// Grafana's variables given values, as the expression of a recording rule.
func TestDashboardQueriesParse(t *testing.T) {
	qs := dashboardQueries(t)
	promtool := tool(t, "promtool", "prometheus")
	vars := strings.NewReplacer("$__rate_interval", "5m", "$tenant", ".*", "$job", ".*")
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, q := range qs {
		expr, _ := json.Marshal(vars.Replace(q.expr)) // a JSON string is a YAML string
		fmt.Fprintf(&b, "      - record: dashboard:query_%d\n        expr: %s\n", i, expr)
	}
	f := filepath.Join(t.TempDir(), "dashboard.rules.yaml")
	if err := os.WriteFile(f, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	runTool(t, ".", nil, promtool, "check", "rules", f)
}
