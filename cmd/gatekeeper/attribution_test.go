package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gatekeeper/internal/gkproc"
	"gatekeeper/internal/testidp"
)

// TestOpencodeAttributedToPerson: opencode, unmodified, runs with the token
// `gatekeeper login -print-token` hands out for a person signed in at the
// identity provider; the run, its turns and its dollars then appear under
// the person's name in the record, the event stream's turn events, the
// person's /metrics series and `report costs -by person` (and under
// their group in `-by group`).
func TestOpencodeAttributedToPerson(t *testing.T) {
	opencode, ok := agentBinary(t, "opencode")
	if !ok {
		t.Skip("SKIPPED: opencode is not installed: the attribution agent test did not run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	idp, err := testidp.Start(testidp.Options{AccessTokenLifetime: 10 * time.Minute},
		testidp.User{Subject: "ada", Name: "Ada Lovelace", Email: "ada@example.com", Groups: []string{"eng", "everyone"}})
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()

	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	const adminTok = "attrib-test-admin-token-0001"
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
log: {format: json}
providers:
  - {name: anthropic, api: anthropic, base_url: mock, default: true, keys: [{name: k, key: not-a-real-key}]}
prices:
  claude-sonnet-4-5: {input: 3, output: 15}
tenants:
  - name: fleet
admin:
  tokens: [{name: ops, token: %s, roles: [operator]}]
identity:
  issuer: %s
  client_id: %s
  groups: [{group: eng, tenant: fleet}]
`, adminTok, idp.Issuer(), testidp.ClientID)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := gkproc.Build(t)
	gk := gkproc.Start(t, bin, cfgPath, nil)

	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "XDG_CONFIG_HOME=" + filepath.Join(dir, "home"),
		"GATEKEEPER_ISSUER=" + idp.Issuer(), "GATEKEEPER_CLIENT_ID=" + testidp.ClientID,
		"GATEKEEPER_URL=" + gk.Base, "GATEKEEPER_ADMIN_TOKEN=" + adminTok}
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("gatekeeper %s: %v\n%s", strings.Join(args, " "), err, errb.String())
		}
		return out.String()
	}
	cliLogin(t, ctx, bin, env, "ada")
	token := strings.TrimSpace(cli("login", "-print-token"))

	// The event stream, from before the run.
	stream, _ := recordStream(t, ctx, gk.Base+"/admin/v1/stream?kind=turn", adminTok)

	home := filepath.Join(dir, "agent-home")
	work := filepath.Join(dir, "work")
	for _, d := range []string{home, work} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	at := agentTarget{base: gk.Base, traj: "ada-oc", prompt: "Say hello."}
	p := startAgent(t, opencodeRunWithKey("anthropic", token)(t, opencode, at, home), work)
	logs := &syncBuffer{}
	waitAgent(t, p, "opencode", 3*time.Minute, logs)

	// The record.
	var rec struct {
		ID    string `json:"id"`
		Spend struct {
			Turns   int64
			Dollars float64
		} `json:"spend"`
		Person struct {
			Subject, Email string
			Groups         []string
		} `json:"person"`
	}
	adminGetAs(t, ctx, gk.Base+"/admin/v1/trajectories/fleet/ada-oc", adminTok, &rec)
	if rec.Person.Subject != "ada" || rec.Person.Email != "ada@example.com" || rec.Spend.Turns < 1 || !(rec.Spend.Dollars > 0) {
		t.Fatalf("record %+v: want ada's, with turns and dollars\ngatekeeper:\n%s", rec, tail(gk.Log()))
	}

	// The event stream's turn events of the run and its threads name ada
	// and her groups, and add up to the run's dollars.
	var turnDollars float64
	for i := 0; i < 100; i++ {
		turnDollars = 0
		sc := bufio.NewScanner(strings.NewReader(stream.String()))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev struct {
				Kind, Trajectory, Person string
				Groups                   []string
				Data                     struct{ Dollars float64 }
			}
			if json.Unmarshal([]byte(data), &ev) != nil || ev.Kind != "turn" || ev.Trajectory != rec.ID && !strings.HasPrefix(ev.Trajectory, rec.ID+"/") {
				continue
			}
			if ev.Person != "ada@example.com" || strings.Join(ev.Groups, ",") != "eng,everyone" {
				t.Fatalf("a turn event of ada's run names %q %q", ev.Person, ev.Groups)
			}
			turnDollars += ev.Data.Dollars
		}
		if turnDollars >= rec.Spend.Dollars-1e-9 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !(turnDollars > 0) || turnDollars < rec.Spend.Dollars-1e-9 {
		t.Errorf("the run's turn events add to $%v, the record says $%v\nstream:\n%s", turnDollars, rec.Spend.Dollars, tail(stream.String()))
	}

	// /metrics: the person's series, under the group that admitted her.
	// Every turn through this gatekeeper was ada's (opencode's title call
	// too, which may be a run of its own).
	if turns, dollars := personSeries(ctx, t, gk.Base, "ada@example.com", "eng"); turns < float64(rec.Spend.Turns) || dollars < rec.Spend.Dollars-1e-9 {
		t.Errorf("ada's metrics: %v turns, $%v; her run alone made %d turns, $%v", turns, dollars, rec.Spend.Turns, rec.Spend.Dollars)
	}

	// report costs -by person and -by group.
	var spend struct {
		Dollars float64
		Rows    []struct {
			Kind, Key, Label string
			Runs             int
			Turns            int64
			Dollars          float64
		}
	}
	for _, by := range []string{"person", "group"} {
		if err := json.Unmarshal([]byte(cli("report", "costs", "-by", by, "-format", "json")), &spend); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"person": "ada@example.com", "group": "eng"}[by]
		found := false
		for _, r := range spend.Rows {
			if r.Label == want {
				found = true
				if r.Dollars < rec.Spend.Dollars-1e-9 || r.Dollars > spend.Dollars+1e-9 || r.Turns < rec.Spend.Turns {
					t.Errorf("-by %s: %s's row %+v, her run alone spent $%v in %d turns", by, want, r, rec.Spend.Dollars, rec.Spend.Turns)
				}
			}
			if r.Kind == "virtual_key" {
				t.Errorf("-by %s: a virtual key row %+v, but no virtual key ran", by, r)
			}
		}
		if !found {
			t.Errorf("-by %s: no row for %s: %+v", by, want, spend.Rows)
		}
	}
	if text := cli("report", "costs", "-by", "person"); !strings.Contains(text, "ada@example.com") {
		t.Errorf("the text report names no ada:\n%s", text)
	}
}

// personSeries sums the person's gatekeeper_turns_total and
// gatekeeper_dollars_total series on base's /metrics; each of them must
// carry group too.
func personSeries(ctx context.Context, t *testing.T, base, person, group string) (turns, dollars float64) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.Contains(line, `person="`+person+`"`) {
			continue
		}
		if !strings.Contains(line, `group="`+group+`"`) {
			t.Errorf("%s's series without the group %s: %s", person, group, line)
		}
		v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		switch {
		case strings.HasPrefix(line, "gatekeeper_dollars_total{"):
			dollars += v
		case strings.HasPrefix(line, "gatekeeper_turns_total{"):
			turns += v
		}
	}
	return turns, dollars
}

// adminGetAs GETs url with the admin token into out, within ctx.
func adminGetAs(t *testing.T, ctx context.Context, url, token string, out any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}
