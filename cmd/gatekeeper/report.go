package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"

	"gatekeeper/report"
)

const reportUsage = `usage: gatekeeper report costs [-tenant T] [-class C] [-since D] [-slope S] [-format text|json|csv|svg]
       gatekeeper report costs -by person|group [-tenant T] [-class C] [-since D] [-format text|json]

  the cost-vs-success report of finished runs marked accepted or rejected:
  per task class and budget dimension, the share of runs accepted within
  each budget, the knee, and a suggested ceiling with its interval

  -by person|group   instead, what every run spent (finished or not), by the
             person who started it or by their groups (a run counts under
             each of its person's groups); runs a virtual key started show
             as "(virtual key: TENANT)"

  -since D   a duration back from now (720h, 30d) or a date (2026-11-01)
  -slope S   the knee is where the curve rises by less than S per grid step (default 0.02)
`

func runReport(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "costs" {
		fmt.Fprint(stderr, reportUsage)
		return flag.ErrHelp
	}
	fs := flag.NewFlagSet("report costs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tenant := fs.String("tenant", "", "only runs of this tenant")
	class := fs.String("class", "", "only runs of this task class")
	since := fs.String("since", "", "only runs created since: a duration back from now (720h, 30d) or a date")
	slope := fs.Float64("slope", 0, "the knee's slope: share of runs per grid step (0: the server's default)")
	format := fs.String("format", "text", "text, json, csv or svg")
	by := fs.String("by", "", "person or group: what every run spent, by who started it")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return errors.New(reportUsage)
	}
	if *by != "" {
		return spendReport(ctx, getenv, stdout, *by, *format, *slope, url.Values{"tenant": {*tenant}, "class": {*class}, "since": {*since}})
	}
	write, ok := map[string]func(io.Writer, report.Report) error{
		"text": report.WriteText, "json": report.WriteJSON, "csv": report.WriteCSV, "svg": report.WriteSVG,
	}[*format]
	if !ok {
		return fmt.Errorf("unknown format %q: use text, json, csv or svg", *format)
	}
	q := url.Values{}
	for k, v := range map[string]string{"tenant": *tenant, "class": *class, "since": *since} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if *slope != 0 {
		q.Set("slope", strconv.FormatFloat(*slope, 'g', -1, 64))
	}
	var raw json.RawMessage
	if err := newAdminClient(getenv).get(ctx, "/admin/v1/reports/costs?"+q.Encode(), &raw); err != nil {
		return err
	}
	rep, err := report.Decode(raw)
	if err != nil {
		return err
	}
	return write(stdout, rep)
}

// spendReport is `report costs -by`: the spend report by person or group,
// in text or JSON.
func spendReport(ctx context.Context, getenv func(string) string, stdout io.Writer, by, format string, slope float64, scope url.Values) error {
	if _, err := report.ParseBy(by); err != nil {
		return fmt.Errorf("unknown -by %q: use person or group", by)
	}
	if slope != 0 {
		return errors.New("-slope is for the cost-vs-success report; a report -by has no curve")
	}
	write, ok := map[string]func(io.Writer, report.Spend) error{"text": report.WriteSpendText, "json": report.WriteSpendJSON}[format]
	if !ok {
		return fmt.Errorf("unknown format %q with -by: use text or json", format)
	}
	q := url.Values{"by": {by}}
	for k, v := range scope {
		if v[0] != "" {
			q.Set(k, v[0])
		}
	}
	var raw json.RawMessage
	if err := newAdminClient(getenv).get(ctx, "/admin/v1/reports/costs?"+q.Encode(), &raw); err != nil {
		return err
	}
	rep, err := report.DecodeSpend(raw)
	if err != nil {
		return err
	}
	return write(stdout, rep)
}
