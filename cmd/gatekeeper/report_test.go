package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"gatekeeper/mockprovider"
	"gatekeeper/report"
)

// TestReportCostsEndToEnd drives runs through a gatekeeper process with
// the Anthropic SDK and the mock provider, marks some through the
// harness's headers and others through the admin API, finishes them with
// the command line, and reads `gatekeeper report costs` in every format.
func TestReportCostsEndToEnd(t *testing.T) {
	mock := httptest.NewServer(mockprovider.New(mockprovider.Options{}))
	defer mock.Close()
	const admin = "report-admin-token-0001"
	const key = "vk-report-test-0001"
	cfgText := fmt.Sprintf(`
listen: 127.0.0.1:0
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: sk-upstream-0001}]}
tenants:
  - {name: fleet, keys: [%s]}
admin:
  tokens: [{name: ops, token: %s, roles: [operator]}]
log: {level: info, format: json}
`, mock.URL, key, admin)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := startReplica(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	getenv := func(k string) string {
		return map[string]string{"GATEKEEPER_URL": rep.base, "GATEKEEPER_ADMIN_TOKEN": admin}[k]
	}
	client := anthropic.NewClient(option.WithBaseURL(rep.base), option.WithAPIKey(key), option.WithMaxRetries(0),
		option.WithHeader("X-Mock-Turn", `{"kind":"text","text":"Done: the change is in."}`))
	mark := func(id, body string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, rep.base+"/admin/v1/trajectories/"+id+"/outcome", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("mark %s: %d %s", id, resp.StatusCode, b)
		}
	}
	runs := []struct {
		id    string
		turns int
		class string // sent in a header on the first call
		last  string // X-Gatekeeper-Outcome on the last call
		admin string // or the admin API's body
	}{
		{"run-b1", 2, "bugfix", "accepted", ""},
		{"run-b2", 4, "bugfix", "accepted", ""},
		{"run-b3", 6, "bugfix", "rejected", ""},
		{"run-b4", 3, "", "", `{"accepted": true, "task_class": "bugfix"}`},
		{"run-d1", 1, "", "", `{"accepted": true, "task_class": "docs"}`},
		{"run-d2", 2, "docs", "", `{"accepted": false}`},
		{"run-unjudged", 2, "docs", "", ""},
	}
	for _, r := range runs {
		for i := range r.turns {
			opts := []option.RequestOption{option.WithHeader("X-Gatekeeper-Trajectory", r.id)}
			if i == 0 && r.class != "" {
				opts = append(opts, option.WithHeader("X-Gatekeeper-Task-Class", r.class))
			}
			if i == r.turns-1 && r.last != "" {
				opts = append(opts, option.WithHeader("X-Gatekeeper-Outcome", r.last))
			}
			if _, err := client.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 256,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("fix issue " + r.id))}}, opts...); err != nil {
				t.Fatalf("%s call %d: %v", r.id, i+1, err)
			}
		}
		if r.admin != "" {
			mark(r.id, r.admin)
		}
		if err := run(ctx, []string{"trajectories", "finish", r.id}, getenv, io.Discard, io.Discard); err != nil {
			t.Fatalf("finish %s: %v", r.id, err)
		}
	}

	reportOut := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := run(ctx, append([]string{"report", "costs"}, args...), getenv, &out, &errOut); err != nil {
			t.Fatalf("report costs %v: %v\n%s", args, err, errOut.String())
		}
		return out.String()
	}

	var got report.Report
	if err := json.Unmarshal([]byte(reportOut("-format", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if got.Runs != 6 || len(got.Classes) != 2 || got.Scope.Scanned != 7 {
		t.Fatalf("report of %d runs in %d classes, %d scanned; want 6 judged runs in 2 classes, 7 scanned", got.Runs, len(got.Classes), got.Scope.Scanned)
	}
	bug, docs := got.Classes[0], got.Classes[1]
	if bug.Class != "bugfix" || bug.Runs != 4 || bug.Accepted != 3 || docs.Class != "docs" || docs.Runs != 2 || docs.Accepted != 1 {
		t.Fatalf("classes %+v / %+v", bug, docs)
	}
	// bugfix took 2, 3 and 4 turns to be accepted, and 6 to be rejected.
	turns := bug.Curves[0]
	for b, want := range []int{0, 0, 1, 2, 3, 3, 3} {
		if p := turns.Points[b]; p.Budget != float64(b) || p.Accepted != want || p.Fraction != float64(want)/4 {
			t.Errorf("F(%d turns) = %+v, want %d of 4", b, p, want)
		}
	}
	if turns.Knee.Budget != 4 || turns.Ceiling == nil || turns.Ceiling.Value != 4 || turns.Ceiling.Runs != 3 {
		t.Errorf("knee %+v ceiling %+v, want both at 4 turns, resting on 3 runs", turns.Knee, turns.Ceiling)
	}
	for _, cv := range bug.Curves[1:] {
		if last := cv.Points[len(cv.Points)-1]; last.Accepted != 3 || cv.Ceiling == nil || cv.Ceiling.Value <= 0 {
			t.Errorf("%s curve ends at %+v, ceiling %+v: want the 3 accepted runs and a positive ceiling", cv.Dimension, last, cv.Ceiling)
		}
	}

	text := reportOut()
	for _, re := range []string{
		`(?m)^class bugfix: 4 runs, 3 accepted \(75\.0%\)$`,
		`(?m)^class docs: 2 runs, 1 accepted \(50\.0%\)$`,
		`(?m)^\s+turns\s+4 turns\s+75\.0%\s+4 turns\s+\[\d, \d\]\s+3 accepted runs$`,
		`(?m)^\s+F\(turns\): 0:0% 1:0% 2:25% 3:50% 4:75% 5:75% 6:75%$`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("text report has no match for %s:\n%s", re, text)
		}
	}
	csv := reportOut("-format", "csv", "-class", "docs")
	if !strings.HasPrefix(csv, "class,dimension,unit,kind,budget,accepted_within,runs,fraction,rests_on\n") ||
		!strings.Contains(csv, "docs,turns,turns,curve,1,1,2,0.5000,\n") || strings.Contains(csv, "bugfix") {
		t.Errorf("CSV of class docs:\n%s", csv)
	}
	svg := reportOut("-format", "svg", "-since", "1d")
	if !strings.HasPrefix(svg, "<svg ") || strings.Count(svg, "<polyline") != 8 || !strings.Contains(svg, "budget b (turns)") {
		t.Errorf("SVG: %d curves\n%.300s", strings.Count(svg, "<polyline"), svg)
	}
	if out := reportOut("-tenant", "nobody"); !strings.HasPrefix(out, "cost-vs-success report: 0 runs (tenant nobody)") {
		t.Errorf("another tenant's report:\n%s", out)
	}
	var errOut bytes.Buffer
	if err := run(ctx, []string{"report", "costs", "-since", "last week"}, getenv, io.Discard, &errOut); err == nil || !strings.Contains(err.Error(), "since must be") {
		t.Errorf("a bad -since: %v", err)
	}
	if err := run(ctx, []string{"report", "costs", "-format", "pdf"}, getenv, io.Discard, &errOut); err == nil {
		t.Error("a bad -format was accepted")
	}
}
