package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"gatekeeper/mockprovider"
)

// reloadConfig is a config of one tenant with limits, a gate named gate
// holding the calls cond matches, on the mock at mockURL.
func reloadConfig(mockURL, gate, cond string, perHour int) string {
	return fmt.Sprintf(`
listen: 127.0.0.1:0
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: sk-upstream-0001}]}
tenants:
  - name: fleet
    keys: [%s]
    limits: {new_trajectories_per_hour: %d}
gates:
  - name: %s
    when: '%s'
    approvers: {roles: [secops], quorum: 1}
approvals:
  keepalive: 50ms
admin:
  tokens:
    - {name: ops, token: %s, roles: [operator]}
    - {name: carol, token: %s, roles: ["approver:secops"]}
log: {level: info, format: json}
`, mockURL, replicaKey, perHour, gate, cond, replicaAdmin, approverToken)
}

// reloadTools declares the tools the mock's replies call.
var reloadTools = []anthropic.ToolUnionParam{
	{OfTool: &anthropic.ToolParam{Name: "Bash", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"command": map[string]any{"type": "string"}}}}},
	{OfTool: &anthropic.ToolParam{Name: "Write", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"path": map[string]any{"type": "string"}}}}},
}

func reloadClient(base, run, spec string) anthropic.Client {
	return anthropic.NewClient(option.WithBaseURL(base+"/t/"+run+"/anthropic"), option.WithAPIKey(replicaKey),
		option.WithMaxRetries(0), option.WithHeader("X-Mock-Turn", spec))
}

func reloadParams(text string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 1024, Tools: reloadTools,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))}}
}

// reloadAnswer is the reload route's answer.
type reloadAnswer struct {
	Reloaded bool     `json:"reloaded"`
	Changed  []string `json:"changed"`
	Problems []string `json:"problems"`
	Error    struct {
		Type string `json:"type"`
	} `json:"error"`
}

func postReload(ctx context.Context, t *testing.T, base, token string) (int, reloadAnswer) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/admin/v1/config/reload", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a reloadAnswer
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("reload answer %d is not JSON: %v: %s", resp.StatusCode, err, b)
	}
	return resp.StatusCode, a
}

// pendingHolds lists the pending approval requests of run; of every run
// when run is "".
func pendingHolds(ctx context.Context, t *testing.T, base, run string) []struct {
	ID   string `json:"id"`
	Gate string `json:"gate"`
} {
	t.Helper()
	var list struct {
		Approvals []struct {
			ID   string `json:"id"`
			Gate string `json:"gate"`
		} `json:"approvals"`
	}
	q := "state=pending"
	if run != "" {
		q += "&trajectory=" + run
	}
	adminCall(ctx, t, "GET", base+"/admin/v1/approvals?"+q, replicaAdmin, &list)
	return list.Approvals
}

// TestConfigReloadLive changes a gate and a tenant limit on a running
// process while one of its streams and one of its holds are open: both
// finish under the rules they began with, the next turns see the new
// ones, and a config with several problems is refused, listing each, and
// changes nothing.
func TestConfigReloadLive(t *testing.T) {
	mock := mockprovider.New(mockprovider.Options{})
	ms := httptest.NewServer(mock)
	defer ms.Close()
	path := filepath.Join(t.TempDir(), "config.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(reloadConfig(ms.URL, "shell-rm", `tool.name == "Bash" && tool.input.command.matches("rm -rf")`, 100))
	rep := startReplica(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// A stream, slow enough to stay open across the reload.
	const words = 40
	slow := fmt.Sprintf(`{"kind":"text","text":%q,"deltas":%d,"event_delay":"50ms"}`, strings.Repeat("word ", words), words)
	sc := reloadClient(rep.base, "streaming", slow)
	stream := sc.Messages.NewStreaming(ctx, reloadParams("talk"))
	defer stream.Close()
	if !stream.Next() {
		t.Fatalf("the stream did not begin: %v", stream.Err())
	}
	var streamed anthropic.Message
	if err := streamed.Accumulate(stream.Current()); err != nil {
		t.Fatal(err)
	}

	// A hold, by the gate the reload removes.
	rmSpec := `{"kind":"tool","first_only":true,"text":"Cleaning.","tools":[{"name":"Bash","input":{"command":"rm -rf ./build"}}]}`
	type result struct {
		m   anthropic.Message
		err error
	}
	held := make(chan result, 1)
	go func() {
		hc := reloadClient(rep.base, "holding", rmSpec)
		s := hc.Messages.NewStreaming(ctx, reloadParams("clean"))
		defer s.Close()
		var m anthropic.Message
		for s.Next() {
			if err := m.Accumulate(s.Current()); err != nil {
				held <- result{err: err}
				return
			}
		}
		held <- result{m, s.Err()}
	}()
	var holds []struct {
		ID   string `json:"id"`
		Gate string `json:"gate"`
	}
	for i := 0; i < 200 && len(holds) == 0; i++ {
		holds = pendingHolds(ctx, t, rep.base, "holding")
		time.Sleep(25 * time.Millisecond)
	}
	if len(holds) != 1 || holds[0].Gate != "shell-rm" {
		t.Fatalf("pending holds of the run: %+v", holds)
	}

	// The reload: the gate now holds Write calls, and the tenant may start
	// two runs an hour, which the two above have used.
	write(reloadConfig(ms.URL, "writes", `tool.name == "Write"`, 2))
	if code, _ := postReload(ctx, t, rep.base, approverToken); code != http.StatusForbidden {
		t.Errorf("reload by an approver: %d, want 403", code)
	}
	code, ans := postReload(ctx, t, rep.base, replicaAdmin)
	if code != http.StatusOK || !ans.Reloaded || strings.Join(ans.Changed, ",") != "tenants,gates" {
		t.Fatalf("reload: %d %+v", code, ans)
	}

	// The stream goes on to its end.
	for stream.Next() {
		if err := streamed.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("the stream open across the reload: %v", err)
	}
	if streamed.StopReason != anthropic.StopReasonEndTurn || len(streamed.Content) != 1 ||
		strings.Count(streamed.Content[0].Text, "word") != words {
		t.Fatalf("the stream open across the reload ended as %q with %+v", streamed.StopReason, streamed.Content)
	}

	// The hold is still the old gate's, and its approval releases the call.
	if code := adminCall(ctx, t, "POST", rep.base+"/admin/v1/approvals/"+holds[0].ID+"/approve", approverToken, nil); code != http.StatusOK {
		t.Fatalf("approve the hold opened before the reload: %d", code)
	}
	var res result
	select {
	case res = <-held:
	case <-ctx.Done():
		t.Fatal("the held call got no reply")
	}
	if res.err != nil {
		t.Fatalf("the hold open across the reload: %v", res.err)
	}
	if n := len(res.m.Content); n == 0 || res.m.Content[n-1].Type != "tool_use" || res.m.Content[n-1].Name != "Bash" {
		t.Fatalf("the released reply: %+v", res.m.Content)
	}

	// The next turns see the new rules: the Bash call goes through on an
	// existing run, a Write call is held, and a third run is refused.
	bc := reloadClient(rep.base, "streaming", rmSpec)
	m, err := bc.Messages.New(ctx, reloadParams("clean again"))
	if err != nil {
		t.Fatalf("a Bash call after the gate changed: %v", err)
	}
	if n := len(m.Content); n == 0 || m.Content[n-1].Type != "tool_use" {
		t.Fatalf("a Bash call after the gate changed: %+v", m.Content)
	}
	writeSpec := `{"kind":"tool","first_only":true,"text":"Writing.","tools":[{"name":"Write","input":{"path":"notes.md"}}]}`
	wctx, wcancel := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() {
		wc := reloadClient(rep.base, "streaming", writeSpec)
		_, err := wc.Messages.New(wctx, reloadParams("write"))
		wdone <- err
	}()
	// The call is on a new thread of the run: a child record.
	for i := 0; i < 200 && (len(holds) == 0 || holds[0].Gate != "writes"); i++ {
		holds = pendingHolds(ctx, t, rep.base, "")
		time.Sleep(25 * time.Millisecond)
	}
	wcancel()
	werr := <-wdone
	if len(holds) != 1 || holds[0].Gate != "writes" {
		t.Fatalf("a Write call after the reload: pending holds %+v, want one by the new gate (the call: %v)", holds, werr)
	}
	checkThirdRunRefused := func(when string) {
		t.Helper()
		tc := reloadClient(rep.base, "third", slow)
		_, err := tc.Messages.New(ctx, reloadParams("hello"))
		var ae *anthropic.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusPaymentRequired || !strings.Contains(ae.Error(), "new_trajectories_per_hour") {
			t.Fatalf("a third run %s: %v, want 402 naming new_trajectories_per_hour", when, err)
		}
	}
	checkThirdRunRefused("after the reload")

	// A config with several problems is refused whole, each one listed.
	write(strings.Replace(strings.Replace(strings.Replace(reloadConfig(ms.URL, "writes", `tool.name ==`, 50),
		"listen: 127.0.0.1:0", "listen: 127.0.0.1:1", 1),
		"new_trajectories_per_hour: 50", "new_trajectories_per_hour: -1", 1),
		"api: anthropic", "api: gemini-ish", 1))
	code, ans = postReload(ctx, t, rep.base, replicaAdmin)
	if code != http.StatusUnprocessableEntity || ans.Reloaded || ans.Error.Type != "invalid_config" {
		t.Fatalf("a broken reload: %d %+v", code, ans)
	}
	for _, want := range []string{"listen: changed", "tenants[0].limits.new_trajectories_per_hour", "providers[0].api", "gates[0] (writes)"} {
		found := false
		for _, p := range ans.Problems {
			found = found || strings.Contains(p, want)
		}
		if !found {
			t.Errorf("no problem naming %q among %q", want, ans.Problems)
		}
	}
	checkThirdRunRefused("after a refused reload")
	var tenant struct {
		Limits struct {
			NewTrajectoriesPerHour int `json:"new_trajectories_per_hour"`
		} `json:"limits"`
	}
	if code := adminCall(ctx, t, "GET", rep.base+"/admin/v1/tenants/fleet", replicaAdmin, &tenant); code != 200 || tenant.Limits.NewTrajectoriesPerHour != 2 {
		t.Fatalf("the admin API's tenant after the refused reload: %d %+v", code, tenant)
	}
	for _, want := range []string{`gatekeeper_config_reloads_total{result="applied"`, `gatekeeper_config_reloads_total{result="refused"`} {
		if !strings.Contains(metricsLines(ctx, t, rep.base, "gatekeeper_config_reloads_total"), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if !strings.Contains(rep.logs.String(), "config reload refused") || !strings.Contains(rep.logs.String(), `"msg":"config reloaded"`) {
		t.Errorf("the reloads are not logged:\n%s", tail(rep.logs.String()))
	}
}

// metricsLines are the lines of /metrics naming metric.
func metricsLines(ctx context.Context, t *testing.T, base, metric string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, metric) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestConfigReloadOnSIGHUP: the process reloads its config file on
// SIGHUP: a virtual key added to the file is let in without a restart.
func TestConfigReloadOnSIGHUP(t *testing.T) {
	ms := httptest.NewServer(mockprovider.New(mockprovider.Options{}))
	defer ms.Close()
	path := filepath.Join(t.TempDir(), "config.yaml")
	v1 := reloadConfig(ms.URL, "shell-rm", `tool.name == "Bash"`, 100)
	if err := os.WriteFile(path, []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := startReplica(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const newKey = "vk-added-by-reload-0001"
	turn := func() error {
		c := anthropic.NewClient(option.WithBaseURL(rep.base+"/anthropic"), option.WithAPIKey(newKey), option.WithMaxRetries(0))
		_, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
		return err
	}
	var ae *anthropic.Error
	if err := turn(); !errors.As(err, &ae) || ae.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a key the config does not name: %v, want 401", err)
	}
	v2 := strings.Replace(v1, "keys: ["+replicaKey+"]", "keys: ["+replicaKey+", "+newKey+"]", 1)
	if err := os.WriteFile(path, []byte(v2), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := rep.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200 && !strings.Contains(rep.logs.String(), `"msg":"config reloaded"`); i++ {
		time.Sleep(25 * time.Millisecond)
	}
	if !strings.Contains(rep.logs.String(), `"by":"SIGHUP"`) {
		t.Fatalf("no reload logged after SIGHUP:\n%s", tail(rep.logs.String()))
	}
	if err := turn(); err != nil {
		t.Fatalf("the key added by the reload: %v", err)
	}
}
