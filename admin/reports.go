package admin

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"gatekeeper/report"
	"gatekeeper/trajectory"
)

// finishedStates are the states whose runs a cost report reads: a run
// still going has not spent what it will.
var finishedStates = []trajectory.State{trajectory.Completed, trajectory.Failed, trajectory.Canceled}

// costReport serves GET /admin/v1/reports/costs?tenant=&class=&since=&slope=:
// the cost-vs-success report (package report) of the finished runs that
// were marked accepted or rejected, as JSON; with by=person or by=group,
// the spend report of every run instead (spendReport). It reads at most
// trajectory.MaxListLimit of the newest runs in each finished state
// (runs, not their subagents, whose spend their run's already holds), and
// says so in scope.truncated when that bound cut the scan short.
func (a *API) costReport(w http.ResponseWriter, r *http.Request, c caller) error {
	q := r.URL.Query()
	scope := report.Scope{Tenant: q.Get("tenant"), Class: q.Get("class"), Since: q.Get("since")}
	var opts report.Options
	if scope.Class != "" {
		c, err := trajectory.ParseTaskClass(scope.Class)
		if err != nil {
			return badRequest("class: " + strings.TrimPrefix(err.Error(), "trajectory: invalid outcome: "))
		}
		scope.Class = c
	}
	var cutoff time.Time
	if scope.Since != "" {
		t, err := parseSince(scope.Since, a.now())
		if err != nil {
			return badRequest(`since must be a duration ("720h", "30d") or a date ("2026-11-01", RFC 3339)`)
		}
		cutoff = t
	}
	if v := q.Get("slope"); v != "" {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || !(x > 0 && x <= 1) {
			return badRequest("slope must be a number in (0, 1]: the share of runs per grid step below which the curve has levelled off")
		}
		opts.Slope = x
	}
	if v := q.Get("by"); v != "" {
		by, err := report.ParseBy(v)
		if err != nil {
			return badRequest("by must be person or group")
		}
		return a.spendReport(r.Context(), w, scope, by, c.tenants, cutoff)
	}
	runs, err := a.finishedRuns(r.Context(), &scope, c.tenants, cutoff)
	if err != nil {
		return err
	}
	rep, err := report.Build(runs, opts)
	if err != nil {
		return badRequest(err.Error())
	}
	rep.Scope = scope
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// finishedRuns lists the judged, finished runs the scope names among
// tenants' (nil: every tenant's), newest first, counting what it read in
// scope.
func (a *API) finishedRuns(ctx context.Context, scope *report.Scope, tenants []string, cutoff time.Time) ([]report.Run, error) {
	roots := ""
	var runs []report.Run
	for _, st := range finishedStates {
		recs, err := a.store.List(ctx, trajectory.Filter{State: st, Tenant: scope.Tenant, Tenants: tenants, ParentID: &roots, Limit: trajectory.MaxListLimit})
		if err != nil {
			return nil, err
		}
		scope.Scanned += len(recs)
		if len(recs) == trajectory.MaxListLimit && !recs[len(recs)-1].CreatedAt.Before(cutoff) {
			scope.Truncated = true
		}
		for _, rec := range recs {
			if rec.Outcome == "" || rec.CreatedAt.Before(cutoff) || scope.Class != "" && rec.TaskClass != scope.Class {
				continue
			}
			runs = append(runs, report.Run{
				Tenant:   rec.Tenant,
				Class:    rec.TaskClass,
				Accepted: rec.Outcome == trajectory.OutcomeAccepted,
				Turns:    rec.Spend.Turns,
				Tokens:   rec.Spend.Tokens(),
				Seconds:  rec.Spend.WallClockS,
				Dollars:  rec.Spend.Dollars,
			})
		}
	}
	return runs, nil
}

// spendReport writes the spend report (report.Spend) of the runs the
// scope names among tenants', in any state (a run still going has spent
// what it spent so far), attributed by by. It reads at most
// trajectory.MaxListLimit of the newest runs (runs, not their subagents,
// whose spend their run's already holds), and says so in
// scope.truncated when that bound cut the scan short.
func (a *API) spendReport(ctx context.Context, w http.ResponseWriter, scope report.Scope, by report.By, tenants []string, cutoff time.Time) error {
	roots := ""
	recs, err := a.store.List(ctx, trajectory.Filter{Tenant: scope.Tenant, Tenants: tenants, ParentID: &roots, Limit: trajectory.MaxListLimit})
	if err != nil {
		return err
	}
	scope.Scanned = len(recs)
	scope.Truncated = len(recs) == trajectory.MaxListLimit && !recs[len(recs)-1].CreatedAt.Before(cutoff)
	var runs []report.SpendRun
	for _, rec := range recs {
		if rec.CreatedAt.Before(cutoff) || scope.Class != "" && rec.TaskClass != scope.Class {
			continue
		}
		run := report.SpendRun{Tenant: rec.Tenant, Turns: rec.Spend.Turns, Tokens: rec.Spend.Tokens(), Dollars: rec.Spend.Dollars}
		if p := rec.Person; p != nil {
			run.Person = &report.Spender{Subject: p.Subject, Label: p.Label(), Groups: p.Groups}
		}
		runs = append(runs, run)
	}
	rep, err := report.BuildSpend(runs, by)
	if err != nil {
		return badRequest(err.Error())
	}
	rep.Scope = scope
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// parseSince reads since as a duration back from now (Go's form, or whole
// days as "30d") or as a date or RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(d); err == nil && n >= 0 && n <= 36500 {
			return now.AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Parse(time.RFC3339, s)
}
