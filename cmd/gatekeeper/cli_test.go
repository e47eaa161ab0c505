package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/admin"
	"gatekeeper/config"
	"gatekeeper/store/memory"
	"gatekeeper/trajectory"
)

// adminServer serves the admin API in-process on a memory store.
func adminServer(t *testing.T) (string, *memory.Store) {
	t.Helper()
	cfg, err := config.Parse([]byte(`
providers:
  - {name: anthropic, api: anthropic, base_url: "http://127.0.0.1:1", keys: [{name: k, key: sk-x}]}
tenants:
  - {name: team-a, keys: [vk-a-0123456789]}
admin:
  tokens:
    - {name: alice, token: operator-token-0123456789, roles: [operator]}
    - {name: bob, token: approver-token-0123456789, roles: [approver]}
`), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	st := memory.New(memory.Options{})
	r := chi.NewRouter()
	admin.New(cfg, st, nil, nil, admin.WithSignals(st)).Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL, st
}

func TestTrajectoryControlVerbs(t *testing.T) {
	base, st := adminServer(t)
	ctx := context.Background()
	mk := func(id string, s trajectory.State) {
		r := trajectory.New(id, "team-a", time.Now())
		if i := strings.LastIndexByte(id, '/'); i >= 0 {
			r.ParentID = id[:i]
		}
		r.State = s
		r.CreatedBy = trajectory.Creator{Kind: trajectory.CreatorOperator, Name: "alice"}
		if err := st.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	mk("run-p", trajectory.Ready)
	mk("run-p/sub", trajectory.Ready)
	mk("run-i", trajectory.WaitingTool)
	mk("run-m", trajectory.CallingModel)
	mk("run-k", trajectory.Ready)
	mk("run-done", trajectory.Completed)
	operator := env("GATEKEEPER_URL", base, "GATEKEEPER_ADMIN_TOKEN", "operator-token-0123456789")
	approver := env("GATEKEEPER_URL", base, "GATEKEEPER_ADMIN_TOKEN", "approver-token-0123456789")
	tests := []struct {
		name   string
		args   []string
		getenv func(string) string
		errHas []string // "" : no error
		outHas []string // regexps the output must match
		check  func(t *testing.T, out []byte)
	}{
		{name: "pause prints the record", args: []string{"pause", "run-p"}, getenv: operator,
			outHas: []string{`(?m)^id\s+run-p$`, `(?m)^state\s+PAUSED$`, `(?m)^child\s+run-p/sub$`}},
		{name: "the subagent was paused too, shown as JSON", args: []string{"show", "-json", "run-p/sub"}, getenv: operator,
			check: func(t *testing.T, out []byte) {
				var r map[string]any
				if err := json.Unmarshal(out, &r); err != nil || r["state"] != "PAUSED" {
					t.Errorf("record %v %v", r, err)
				}
			}},
		{name: "resume a child by its slash id", args: []string{"resume", "run-p/sub", "-json"}, getenv: operator,
			check: func(t *testing.T, out []byte) {
				var r map[string]any
				if err := json.Unmarshal(out, &r); err != nil || r["id"] != "run-p/sub" || r["state"] != "READY" {
					t.Errorf("record %v %v", r, err)
				}
			}},
		{name: "interrupt with a positional message", args: []string{"interrupt", "run-i", "stop and summarize", "-json"}, getenv: operator,
			check: func(t *testing.T, out []byte) {
				var r trajectory.Record
				if err := json.Unmarshal(out, &r); err != nil {
					t.Fatal(err)
				}
				if c := r.Pending.Control; c == nil || c.Kind != trajectory.ControlInterrupt || c.Message != "stop and summarize" || c.By != "alice" {
					t.Errorf("pending control %+v", c)
				}
			}},
		{name: "interrupt with -m", args: []string{"interrupt", "-m", "second thought", "run-i"}, getenv: operator,
			outHas: []string{`(?m)^pending control\s+interrupt by alice at `}},
		{name: "interrupt without a message", args: []string{"interrupt", "run-i"}, getenv: operator, errHas: []string{"usage"}},
		{name: "interrupt with both messages", args: []string{"interrupt", "run-i", "a", "-m", "b"}, getenv: operator, errHas: []string{"usage"}},
		{name: "pause takes no message", args: []string{"pause", "run-i", "-m", "x"}, getenv: operator, errHas: []string{"usage"}},
		{name: "cancel while calling is pending, with a reason", args: []string{"cancel", "run-m", "-reason", "runaway"}, getenv: operator,
			outHas: []string{`(?m)^state\s+CALLING_MODEL$`, `(?m)^pending control\s+cancel by alice`}},
		{name: "kill", args: []string{"kill", "run-k"}, getenv: operator,
			outHas: []string{`(?m)^created by\s+operator alice$`, `(?m)^state\s+FAILED$`, `(?m)^exit reason\s+KILLED$`}},
		{name: "finish", args: []string{"finish", "run-i"}, getenv: operator,
			outHas: []string{`(?m)^state\s+COMPLETED$`, `(?m)^exit reason\s+FINISHED$`}},
		{name: "a finished run", args: []string{"kill", "run-done"}, getenv: operator,
			errHas: []string{"409", `trajectory "run-done" has already finished`, "conflict_error"}},
		{name: "an unknown run", args: []string{"pause", "nope"}, getenv: operator, errHas: []string{"404", "no such trajectory"}},
		{name: "an approver cannot", args: []string{"pause", "run-k"}, getenv: approver, errHas: []string{"403", "operator role"}},
		{name: "two ids", args: []string{"pause", "run-k", "run-i"}, getenv: operator, errHas: []string{"usage"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(ctx, append([]string{"trajectories"}, tc.args...), tc.getenv, &out, &out)
			if len(tc.errHas) > 0 {
				if err == nil {
					t.Fatalf("no error; output:\n%s", out.String())
				}
				for _, w := range tc.errHas {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			for _, re := range tc.outHas {
				if !regexp.MustCompile(re).Match(out.Bytes()) {
					t.Errorf("output lacks %s:\n%s", re, out.String())
				}
			}
			if tc.check != nil {
				tc.check(t, out.Bytes())
			}
		})
	}
	// The reason reached the event log.
	evs, err := st.Events(ctx, "run-m", 0, 10)
	if err != nil || len(evs) != 1 || !strings.Contains(string(evs[0].Data), `"reason":"runaway"`) {
		t.Errorf("run-m events %+v %v", evs, err)
	}
}

func TestTrajectoriesUsage(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"trajectories"}, env(), &out, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v", err)
	}
	for _, verb := range []string{"pause ID", "resume ID", "cancel ID", "kill ID", "finish ID", "interrupt ID MESSAGE"} {
		if !strings.Contains(out.String(), verb) {
			t.Errorf("usage lacks %q:\n%s", verb, out.String())
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"trajectories", "suspend", "x"}, env(), &out, &out); err == nil || !strings.Contains(err.Error(), "interrupt") {
		t.Errorf("unknown verb: %v", err)
	}
}
