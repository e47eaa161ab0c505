package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"gatekeeper/mockprovider"
	"gatekeeper/trajectory"
)

func runMock(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mock-provider", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:9090", "listen address")
	script := fs.String("script", "", "script file (YAML) choosing each turn")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts := mockprovider.Options{}
	if *script != "" {
		sc, err := mockprovider.LoadScript(*script)
		if err != nil {
			return err
		}
		opts.Script = sc
	}
	return mockprovider.Run(ctx, *addr, opts, func(a string) {
		fmt.Fprintf(stdout, "mock provider listening on http://%s\n", a)
	})
}

func runCheckConfig(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "config.yaml", "config file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if _, err := loadConfig(*path, getenv, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: ok\n", *path)
	return nil
}

// adminClient calls the admin API.
type adminClient struct {
	base  string
	token string
	hc    *http.Client
}

func newAdminClient(getenv func(string) string) *adminClient {
	base := getenv("GATEKEEPER_URL")
	if base == "" {
		base = "http://127.0.0.1:8080"
	}
	return &adminClient{base: strings.TrimSuffix(base, "/"), token: getenv("GATEKEEPER_ADMIN_TOKEN"),
		hc: &http.Client{Timeout: 30 * time.Second}}
}

func (c *adminClient) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Type, Message string } `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
			return fmt.Errorf("%s: %s (%s)", resp.Status, e.Error.Message, e.Error.Type)
		}
		return fmt.Errorf("%s", resp.Status)
	}
	return json.Unmarshal(body, out)
}

func runTrajectories(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, "usage: gatekeeper trajectories ls [-state S] [-tenant T] | show ID  [-json]\n")
		return flag.ErrHelp
	}
	verb := args[0]
	fs := flag.NewFlagSet("trajectories "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	state := fs.String("state", "", "only records in this state (ls)")
	tenant := fs.String("tenant", "", "only records of this tenant (ls)")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	c := newAdminClient(getenv)
	switch verb {
	case "ls":
		if len(pos) != 0 {
			return errors.New("usage: gatekeeper trajectories ls [-state S] [-tenant T] [-json]")
		}
		q := url.Values{}
		if *state != "" {
			q.Set("state", *state)
		}
		if *tenant != "" {
			q.Set("tenant", *tenant)
		}
		var out struct {
			Trajectories []json.RawMessage `json:"trajectories"`
		}
		if err := c.get(ctx, "/admin/v1/trajectories?"+q.Encode(), &out); err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, out.Trajectories)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTENANT\tSTATE\tTURNS\tLAST STOP\tTOKENS\tUPDATED")
		for _, raw := range out.Trajectories {
			var r trajectory.Record
			if err := json.Unmarshal(raw, &r); err != nil {
				return err
			}
			s := r.Spend
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\n", r.ID, r.Tenant, r.State, r.Turns, dash(r.LastStopReason),
				s.InputTokens+s.CachedInputTokens+s.CacheWriteTokens+s.OutputTokens, r.UpdatedAt.Format(time.RFC3339))
		}
		return tw.Flush()
	case "show":
		if len(pos) != 1 {
			return errors.New("usage: gatekeeper trajectories show ID [-json]")
		}
		var raw json.RawMessage
		if err := c.get(ctx, "/admin/v1/trajectories/"+url.PathEscape(pos[0]), &raw); err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, raw)
		}
		var r trajectory.Record
		if err := json.Unmarshal(raw, &r); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
		row("id", r.ID)
		row("parent", dash(r.ParentID))
		row("tenant", r.Tenant)
		row("state", string(r.State))
		row("exit reason", dash(r.ExitReason))
		row("turns", fmt.Sprint(r.Turns))
		row("last stop", dash(r.LastStopReason))
		row("spend", fmt.Sprintf("input %d, cached %d, cache write %d, output %d tokens%s", r.Spend.InputTokens,
			r.Spend.CachedInputTokens, r.Spend.CacheWriteTokens, r.Spend.OutputTokens, map[bool]string{true: " (estimated)"}[r.Spend.Estimated]))
		for _, pc := range r.Pending.ToolCalls {
			row("pending call", fmt.Sprintf("%s %s (deadline %s)", pc.ID, pc.Name, pc.Deadline.Format(time.RFC3339)))
		}
		for _, ch := range r.Children {
			row("child", ch)
		}
		row("updated", r.UpdatedAt.Format(time.RFC3339))
		return tw.Flush()
	}
	return fmt.Errorf("unknown verb %q: use ls or show", verb)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// parseInterleaved parses flags that may come before or after the
// positional arguments ("show ID -json" and "show -json ID").
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
