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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\n", r.ID, r.State, r.Gate, r.Call.Name, r.Trajectory,
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
// table a person decides from: the exact call first.
func printApproval(w io.Writer, raw json.RawMessage, asJSON bool) error {
	if asJSON {
		return printJSON(w, raw)
	}
	var r approvals.Request
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("id", r.ID)
	row("state", string(r.State))
	row("reason", dash(r.Reason))
	row("tool", r.Call.Name)
	// The API indents its answers; the call reads best on one line, as
	// its digest was taken.
	var input bytes.Buffer
	if err := json.Compact(&input, r.Call.Input); err != nil {
		return err
	}
	row("input", input.String())
	row("digest", r.Digest)
	row("gate", r.Gate)
	row("why", r.Why)
	row("trajectory", r.Trajectory)
	row("tenant", r.Tenant)
	row("budget used", fmt.Sprintf("%.0f%%", 100*r.Observed.BudgetUsed))
	need := fmt.Sprintf("%d of roles %s", r.Quorum, strings.Join(r.Roles, ", "))
	if r.DistinctRoles {
		need += ", each a different role"
	}
	row("needs", need)
	for _, v := range r.Votes {
		what := "deny"
		if v.Approve {
			what = "approve"
		}
		line := fmt.Sprintf("%s %s via %s at %s", v.Approver, what, v.Via, v.At.Format(time.RFC3339))
		if v.Reason != "" {
			line += ": " + v.Reason
		}
		row("vote", line)
	}
	row("created", r.CreatedAt.Format(time.RFC3339))
	row("expires", r.ExpiresAt.Format(time.RFC3339))
	return tw.Flush()
}
