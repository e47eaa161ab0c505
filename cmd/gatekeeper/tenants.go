package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"text/tabwriter"
)

// tenantRow is what the CLI reads of a tenant in the admin API's answer.
type tenantRow struct {
	Name         string `json:"name"`
	Trajectories string `json:"trajectories"`
	Limits       struct {
		DollarsPerDay          float64 `json:"dollars_per_day"`
		DollarsPerMonth        float64 `json:"dollars_per_month"`
		TokensPerDay           int64   `json:"tokens_per_day"`
		MaxLiveTrajectories    int     `json:"max_live_trajectories"`
		NewTrajectoriesPerHour int     `json:"new_trajectories_per_hour"`
	} `json:"limits"`
	Spend *struct {
		Day struct {
			Dollars float64
			Tokens  int64
		} `json:"day"`
		Month struct {
			Dollars float64
			Tokens  int64
		} `json:"month"`
		InFlight struct {
			Calls   int64   `json:"calls"`
			Dollars float64 `json:"dollars"`
		} `json:"in_flight"`
		StartedLastHour int64 `json:"started_last_hour"`
	} `json:"spend"`
	LiveRuns       int  `json:"live_runs"`
	LiveRunsCapped bool `json:"live_runs_capped"`
}

// runTenants prints every tenant's limits and spend, or one tenant's.
func runTenants(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tenants", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return errors.New("usage: gatekeeper tenants [NAME] [-json]")
	}
	c := newAdminClient(getenv)
	var raws []json.RawMessage
	if len(pos) == 1 {
		var raw json.RawMessage
		if err := c.get(ctx, "/admin/v1/tenants/"+url.PathEscape(pos[0]), &raw); err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, raw)
		}
		raws = []json.RawMessage{raw}
	} else {
		var out struct {
			Tenants []json.RawMessage `json:"tenants"`
		}
		if err := c.get(ctx, "/admin/v1/tenants", &out); err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, out.Tenants)
		}
		raws = out.Tenants
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tRUNS BY\tLIVE RUNS\tDAY $\tMONTH $\tDAY TOKENS\tIN FLIGHT\tSTARTED (1H)")
	for _, raw := range raws {
		var t tenantRow
		if err := json.Unmarshal(raw, &t); err != nil {
			return err
		}
		l := t.Limits
		live := fmt.Sprint(t.LiveRuns)
		if t.LiveRunsCapped {
			live += "+"
		}
		day, month, tokens, inFlight, started := "-", "-", "-", "-", "-"
		if sp := t.Spend; sp != nil {
			day = fmt.Sprintf("%.2f", sp.Day.Dollars) + ofLimit(l.DollarsPerDay, "%.2f")
			month = fmt.Sprintf("%.2f", sp.Month.Dollars) + ofLimit(l.DollarsPerMonth, "%.2f")
			tokens = fmt.Sprint(sp.Day.Tokens) + ofLimit(float64(l.TokensPerDay), "%.0f")
			inFlight = fmt.Sprintf("%d calls, $%.2f", sp.InFlight.Calls, sp.InFlight.Dollars)
			started = fmt.Sprint(sp.StartedLastHour) + ofLimit(float64(l.NewTrajectoriesPerHour), "%.0f")
		}
		live += ofLimit(float64(l.MaxLiveTrajectories), "%.0f")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.Trajectories, live, day, month, tokens, inFlight, started)
	}
	return tw.Flush()
}

// ofLimit is " / limit", or "" when the limit is 0 (none).
func ofLimit(limit float64, format string) string {
	if limit == 0 {
		return ""
	}
	return " / " + fmt.Sprintf(format, limit)
}
