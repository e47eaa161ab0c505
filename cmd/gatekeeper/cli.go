package main

import (
	"bytes"
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
	var rl mockprovider.RateLimit
	fs.IntVar(&rl.RPM, "rpm", 0, "turn requests per minute and key above which the mock answers 429 (0: no limit)")
	fs.Int64Var(&rl.InputTPM, "input-tpm", 0, "input tokens per minute and key (0: no limit)")
	fs.Int64Var(&rl.OutputTPM, "output-tpm", 0, "output tokens per minute and key (0: no limit)")
	fs.DurationVar(&rl.Quantum, "quantum", 0, "enforce the per-minute limits over this interval, as providers do: a bucket holds this share of a minute's limit (0: a whole minute)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts := mockprovider.Options{RateLimit: rl}
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
	return c.do(ctx, http.MethodGet, path, nil, out)
}

func (c *adminClient) post(ctx context.Context, path string, body any, out any) error {
	return c.send(ctx, http.MethodPost, path, body, out)
}

func (c *adminClient) send(ctx context.Context, method, path string, body any, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return c.do(ctx, method, path, b, out)
}

// do calls the admin API; an answer outside 2xx becomes an error carrying
// the API's message.
func (c *adminClient) do(ctx context.Context, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error struct{ Type, Message string } `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			return fmt.Errorf("%s: %s (%s)", resp.Status, e.Error.Message, e.Error.Type)
		}
		return fmt.Errorf("%s", resp.Status)
	}
	return json.Unmarshal(b, out)
}

const trajectoriesUsage = `usage: gatekeeper trajectories VERB [flags]

  ls [-state S] [-tenant T]          list records
  show ID                            one record
  pause ID | resume ID               hold a run at its next turn boundary, or let it go on
  cancel ID | finish ID              end a run as CANCELED, or as COMPLETED
  kill ID                            end a run as FAILED at once, its call in flight included
  interrupt ID MESSAGE | -m MESSAGE  add MESSAGE as a user message to the run's next request
  budget ID [-dollars N] [-tokens N] [-turns N] [-wall-clock D] [-on-exhaust fail|pause]
                                     raise or lower a run's budget (0: no ceiling); resumes a
                                     run its budget paused once the new budget allows a call

Control verbs act on the run and every subagent under it; -reason TEXT is
recorded with the request. Every verb prints JSON with -json.
`

func runTrajectories(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, trajectoriesUsage)
		return flag.ErrHelp
	}
	verb := args[0]
	fs := flag.NewFlagSet("trajectories "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	state := fs.String("state", "", "only records in this state (ls)")
	tenant := fs.String("tenant", "", "only records of this tenant (ls)")
	message := fs.String("m", "", "the message (interrupt)")
	reason := fs.String("reason", "", "why, recorded with the request (control verbs, budget)")
	dollars := fs.Float64("dollars", 0, "dollar ceiling (budget)")
	tokens := fs.Int64("tokens", 0, "token ceiling (budget)")
	turns := fs.Int64("turns", 0, "model-call ceiling (budget)")
	wallClock := fs.Duration("wall-clock", 0, "wall-clock ceiling (budget)")
	onExhaust := fs.String("on-exhaust", "", "fail or pause, when the budget runs out (budget)")
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
		return printRecord(stdout, raw, *asJSON)
	case "pause", "resume", "cancel", "kill", "finish", "interrupt":
		body := map[string]string{}
		switch {
		case verb == "interrupt" && len(pos) == 2 && *message == "":
			body["message"] = pos[1]
		case verb == "interrupt" && len(pos) == 1 && *message != "":
			body["message"] = *message
		case verb == "interrupt":
			return errors.New("usage: gatekeeper trajectories interrupt ID MESSAGE (or -m MESSAGE) [-reason TEXT] [-json]")
		case len(pos) != 1 || *message != "":
			return fmt.Errorf("usage: gatekeeper trajectories %s ID [-reason TEXT] [-json]", verb)
		}
		if *reason != "" {
			body["reason"] = *reason
		}
		var raw json.RawMessage
		if err := c.post(ctx, "/admin/v1/trajectories/"+url.PathEscape(pos[0])+"/"+verb, body, &raw); err != nil {
			return err
		}
		return printRecord(stdout, raw, *asJSON)
	case "budget":
		body := map[string]any{}
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "dollars":
				body["dollars"] = *dollars
			case "tokens":
				body["tokens"] = *tokens
			case "turns":
				body["turns"] = *turns
			case "wall-clock":
				body["wall_clock_s"] = int64(wallClock.Seconds())
			case "on-exhaust":
				body["on_exhaust"] = *onExhaust
			}
		})
		if len(pos) != 1 || len(body) == 0 {
			return errors.New("usage: gatekeeper trajectories budget ID [-dollars N] [-tokens N] [-turns N] [-wall-clock D] [-on-exhaust fail|pause] [-reason TEXT] [-json]")
		}
		if *reason != "" {
			body["reason"] = *reason
		}
		var raw json.RawMessage
		if err := c.send(ctx, http.MethodPatch, "/admin/v1/trajectories/"+url.PathEscape(pos[0])+"/budget", body, &raw); err != nil {
			return err
		}
		return printRecord(stdout, raw, *asJSON)
	}
	return fmt.Errorf("unknown verb %q: use ls, show, pause, resume, cancel, kill, finish, interrupt or budget", verb)
}

// printRecord prints a record the admin API returned, as JSON or as a
// table.
func printRecord(w io.Writer, raw json.RawMessage, asJSON bool) error {
	if asJSON {
		return printJSON(w, raw)
	}
	var r trajectory.Record
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("id", r.ID)
	row("parent", dash(r.ParentID))
	row("tenant", r.Tenant)
	if c := r.CreatedBy; c.Kind != "" {
		row("created by", c.Kind+" "+c.Name)
	}
	row("state", string(r.State))
	if r.PauseReason != "" {
		row("paused for", r.PauseReason)
	}
	row("exit reason", dash(r.ExitReason))
	b := r.Budget
	row("budget", fmt.Sprintf("$%g, %d tokens, %d turns, %ds wall clock (0: none); on exhaust %s", b.Dollars, b.Tokens, b.Turns, b.WallClockS, dash(b.OnExhaust)))
	row("stage", fmt.Sprintf("%s (%.0f%% of %s)", dash(r.Stage), r.BudgetUsed*100, dash(r.BindingDimension)))
	row("spent", fmt.Sprintf("$%.6f", r.Spend.Dollars))
	row("turns", fmt.Sprint(r.Turns))
	row("last stop", dash(r.LastStopReason))
	row("spend", fmt.Sprintf("input %d, cached %d, cache write %d, output %d tokens%s", r.Spend.InputTokens,
		r.Spend.CachedInputTokens, r.Spend.CacheWriteTokens, r.Spend.OutputTokens, map[bool]string{true: " (estimated)"}[r.Spend.Estimated]))
	for _, pc := range r.Pending.ToolCalls {
		dl := "no deadline"
		if !pc.Deadline.IsZero() {
			dl = "deadline " + pc.Deadline.Format(time.RFC3339)
		}
		row("pending call", fmt.Sprintf("%s %s (%s)", pc.ID, pc.Name, dl))
	}
	if pc := r.Pending.Control; pc != nil {
		row("pending control", fmt.Sprintf("%s by %s at %s", pc.Kind, dash(pc.By), pc.At.Format(time.RFC3339)))
	}
	for _, ch := range r.Children {
		row("child", ch)
	}
	row("updated", r.UpdatedAt.Format(time.RFC3339))
	return tw.Flush()
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
