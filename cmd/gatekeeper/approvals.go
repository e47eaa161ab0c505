package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"gatekeeper/approvals"
)

const approvalsUsage = `usage: gatekeeper approvals VERB [flags]

  ls [-state S] [-trajectory ID] [-limit N]  list approval requests, newest first
  show ID                                    one request: the call, its gate, the votes
  approve ID [-reason TEXT]                  vote for the call, as this token's holder
  deny ID [-reason TEXT]                     vote against it; one deny decides

The vote counts only with a role the request's gate names (an admin token's
role approver:<group>). Every verb prints JSON with -json.
`

func runApprovals(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, approvalsUsage)
		return flag.ErrHelp
	}
	verb := args[0]
	fs := flag.NewFlagSet("approvals "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	state := fs.String("state", "", "only requests in this state (ls)")
	traj := fs.String("trajectory", "", "only requests of this trajectory (ls)")
	limit := fs.Int("limit", 0, "at most this many requests (ls)")
	reason := fs.String("reason", "", "why, recorded with the vote (approve, deny)")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	c := newAdminClient(getenv)
	switch verb {
	case "ls":
		if len(pos) != 0 {
			return errors.New("usage: gatekeeper approvals ls [-state S] [-trajectory ID] [-limit N] [-json]")
		}
		q := url.Values{}
		if *state != "" {
			q.Set("state", *state)
		}
		if *traj != "" {
			q.Set("trajectory", *traj)
		}
		if *limit > 0 {
			q.Set("limit", fmt.Sprint(*limit))
		}
		var out struct {
			Approvals []json.RawMessage `json:"approvals"`
		}
		if err := c.get(ctx, "/admin/v1/approvals?"+q.Encode(), &out); err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, out.Approvals)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tGATE\tTOOL\tTRAJECTORY\tVOTES\tEXPIRES")
		for _, raw := range out.Approvals {
			var r approvals.Request
			if err := json.Unmarshal(raw, &r); err != nil {
				return err
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\n", approvals.Visible(r.ID), r.State, approvals.Visible(r.Gate),
				approvals.Visible(r.Call.Name), approvals.Visible(r.Trajectory),
				r.Approving(), r.Quorum, r.ExpiresAt.Format(time.RFC3339))
		}
		return tw.Flush()
	case "show":
		if len(pos) != 1 {
			return errors.New("usage: gatekeeper approvals show ID [-json]")
		}
		var raw json.RawMessage
		if err := c.get(ctx, "/admin/v1/approvals/"+url.PathEscape(pos[0]), &raw); err != nil {
			return err
		}
		return printApproval(stdout, raw, *asJSON)
	case "approve", "deny":
		if len(pos) != 1 {
			return fmt.Errorf("usage: gatekeeper approvals %s ID [-reason TEXT] [-json]", verb)
		}
		body := map[string]string{}
		if *reason != "" {
			body["reason"] = *reason
		}
		var raw json.RawMessage
		if err := c.post(ctx, "/admin/v1/approvals/"+url.PathEscape(pos[0])+"/"+verb, body, &raw); err != nil {
			return err
		}
		return printApproval(stdout, raw, *asJSON)
	}
	return fmt.Errorf("unknown verb %q: use ls, show, approve or deny", verb)
}

// printApproval prints a request the admin API returned, as JSON or as a
// table a person decides from: the exact call first, whole, in its
// canonical form, with every invisible character written as an escape
// (approvals.Visible) so that neither a terminal nor the text can hide or
// reorder a part of it.
func printApproval(w io.Writer, raw json.RawMessage, asJSON bool) error {
	if asJSON {
		return printJSON(w, raw)
	}
	var r approvals.Request
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	// The API indents its answers and escapes HTML characters; the call
	// reads best on one line, as its digest was taken.
	input := string(r.Call.Input)
	if c, err := approvals.Canonical(r.Call.Name, r.Call.Input); err == nil {
		input = string(c.Input)
	} else {
		var b bytes.Buffer
		if err := json.Compact(&b, r.Call.Input); err != nil {
			return err
		}
		input = b.String()
	}
	v := approvals.Visible
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, val string) { fmt.Fprintf(tw, "%s\t%s\n", k, val) }
	row("id", v(r.ID))
	row("state", v(string(r.State)))
	row("reason", dash(v(r.Reason)))
	row("tool", v(r.Call.Name))
	row("input", v(input))
	if n := approvals.CountInvisible(r.Call.Name) + approvals.CountInvisible(input); n > 0 {
		row("warning", fmt.Sprintf("the call holds %d invisible or bidirectional control characters, shown as \\u escapes", n))
	}
	for _, m := range r.Matched {
		row("matched", fmt.Sprintf("%s at character %d of %d: %s⟦%s⟧%s", v(m.Where), m.At, m.Of, v(m.Before), v(m.Text), v(m.After)))
	}
	row("digest", v(r.Digest))
	row("gate", v(r.Gate))
	row("why", v(r.Why))
	row("trajectory", v(r.Trajectory))
	row("tenant", v(r.Tenant))
	row("budget used", fmt.Sprintf("%.0f%%", 100*r.Observed.BudgetUsed))
	need := fmt.Sprintf("%d of roles %s", r.Quorum, v(strings.Join(r.Roles, ", ")))
	if r.DistinctRoles {
		need += ", each a different role"
	}
	row("needs", need)
	for _, vote := range r.Votes {
		what := "deny"
		if vote.Approve {
			what = "approve"
		}
		line := fmt.Sprintf("%s %s via %s at %s", v(vote.Approver), what, v(vote.Via), vote.At.Format(time.RFC3339))
		if vote.Reason != "" {
			line += ": " + v(vote.Reason)
		}
		row("vote", line)
	}
	row("created", r.CreatedAt.Format(time.RFC3339))
	row("expires", r.ExpiresAt.Format(time.RFC3339))
	return tw.Flush()
}
