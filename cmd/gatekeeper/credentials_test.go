package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/internal/redistest"
	"gatekeeper/mockprovider"
)

// Forwarded credentials of the test: a Claude subscription's bearer token
// and a Gemini API key sent in the query, both the agent's own.
const (
	byoOAuth  = "sk-ant-oat01-byo-Subscription-Token-7f3e9a1c5b2d"
	byoGemKey = "AIzaByoOwnGeminiKey-4d8c2e6a0f"
	byoOAIKey = "sk-proj-byo-Own-OpenAI-Key-2b7d1f9e3a"
	byoKey    = "vk-byo-tenant-0001"
	byoAdmin  = "byo-admin-token-0123456789"
)

// byoConfig is a config whose one tenant forwards its agents'
// credentials, with providers at mockURL and the store in the Redis at
// redisURL ("": the memory store).
func byoConfig(t *testing.T, mockURL, redisURL string) string {
	t.Helper()
	store := "{kind: memory}"
	if redisURL != "" {
		store = fmt.Sprintf("{kind: redis, redis_url: %q}", redisURL)
	}
	text := fmt.Sprintf(`
listen: 127.0.0.1:0
store: %[2]s
providers:
  - {name: anthropic, api: anthropic, base_url: %[1]q, keys: [{name: k, key: sk-ant-pool-0001, rpm: 1000}]}
  - {name: gemini, api: gemini, base_url: %[1]q, keys: [{name: k, key: goog-pool-0001}]}
  - {name: openai, api: openai, base_url: %[1]q, keys: [{name: k, key: sk-openai-pool-0001}]}
prices:
  claude-sonnet-4-5: {input: 3.00, cached_input: 0.30, cache_write: 3.75, output: 15.00}
tenants:
  - {name: byo, keys: [%[3]s], credentials: forward}
gates:
  - name: destructive-shell
    when: 'tool.class == "shell" && tool.command.contains("rm -rf")'
    approvers: {roles: [secops]}
    expiry: 1h
admin:
  tokens:
    - {name: admin, token: %[4]s, roles: [operator, "approver:secops"]}
log: {level: debug, format: json}
`, mockURL, store, byoKey, byoAdmin)
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestForwardedCredentialLeavesNoTrace is the forwarded credential's
// containment: a tenant with credentials: forward runs a turn, a gated
// call held and approved, a budget refusal, pass-through calls and a
// Gemini turn with its key in the query, all with the agent's own
// credentials. Those reach the provider; and neither they nor any run of
// 12 of their characters nor their SHA-256 appear in gatekeeper's JSON log
// (debug level), the live event stream, /metrics, the admin API's answers
// (runs, their events, approvals), or any key or value in Redis.
func TestForwardedCredentialLeavesNoTrace(t *testing.T) {
	srv := redistest.StartServer(t)
	mock := mockprovider.New(mockprovider.Options{})
	ms := httptest.NewServer(mock)
	t.Cleanup(ms.Close)
	gk := startReplica(t, byoConfig(t, ms.URL, srv.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()

	call := func(method, path, body string, hdr ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, gk.base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	admin := func(method, path, body string) string {
		t.Helper()
		code, b := call(method, path, body, "Authorization", "Bearer "+byoAdmin)
		if code != http.StatusOK && code != http.StatusCreated {
			t.Fatalf("%s %s: %d %s", method, path, code, b)
		}
		return b
	}

	// The live event stream, read from before the first turn to the end.
	stream, stopStream := recordStream(t, ctx, gk.base+"/admin/v1/stream", byoAdmin)

	claude := []string{"X-Gatekeeper-Key", byoKey, "Authorization", "Bearer " + byoOAuth, "anthropic-version", "2023-06-01",
		"anthropic-beta", "oauth-2025-04-20,claude-code-20250219", "content-type", "application/json"}
	turn := `{"model":"claude-sonnet-4-5","max_tokens":256,"stream":true,"messages":[{"role":"user","content":"hello"}]}`

	// A turn.
	if code, b := call("POST", "/t/byo-turn/anthropic/v1/messages?beta=true", turn, claude...); code != 200 {
		t.Fatalf("turn: %d %s", code, b)
	}

	// A gated call, held and approved.
	held := `{"model":"claude-sonnet-4-5","max_tokens":256,"messages":[{"role":"user","content":"clean up"}],"tools":[{"name":"Bash","input_schema":{"type":"object"}}]}`
	answer := make(chan string, 1)
	go func() {
		code, b := call("POST", "/t/byo-held/anthropic/v1/messages", held, append(claude,
			"X-Mock-Turn", `{"kind":"tool","tools":[{"name":"Bash","input":{"command":"rm -rf /tmp/scratch"}}]}`)...)
		answer <- fmt.Sprint(code, " ", b)
	}()
	var list struct {
		Approvals []struct {
			ID string `json:"id"`
		} `json:"approvals"`
	}
	for i := 0; i < 300 && len(list.Approvals) == 0; i++ {
		time.Sleep(20 * time.Millisecond)
		if err := json.Unmarshal([]byte(admin("GET", "/admin/v1/approvals?state=pending&trajectory=byo-held", "")), &list); err != nil {
			t.Fatal(err)
		}
	}
	if len(list.Approvals) != 1 {
		t.Fatalf("pending approvals %+v, want 1", list.Approvals)
	}
	approval := admin("GET", "/admin/v1/approvals/"+list.Approvals[0].ID, "")
	admin("POST", "/admin/v1/approvals/"+list.Approvals[0].ID+"/approve", "")
	select {
	case a := <-answer:
		if !strings.HasPrefix(a, "200 ") || !strings.Contains(a, "rm -rf /tmp/scratch") {
			t.Fatalf("the approved call: %s", a)
		}
	case <-ctx.Done():
		t.Fatal("the approved call was not delivered")
	}

	// A budget refusal.
	admin("POST", "/admin/v1/trajectories", `{"id":"byo-budget","tenant":"byo","budget":{"turns":1}}`)
	var codes []int
	for range 2 {
		code, _ := call("POST", "/t/byo-budget/anthropic/v1/messages", turn, claude...)
		codes = append(codes, code)
	}
	if codes[0] != 200 || codes[1] != http.StatusPaymentRequired {
		t.Fatalf("budget of one turn: %v, want 200 then 402", codes)
	}

	// Pass-through, and a Gemini turn with its key in the query.
	if code, b := call("GET", "/anthropic/v1/models?limit=1000", "", claude...); code != 200 {
		t.Fatalf("models: %d %s", code, b)
	}
	if code, b := call("POST", "/anthropic/v1/messages/count_tokens", turn, claude...); code != 200 {
		t.Fatalf("count_tokens: %d %s", code, b)
	}
	gem := `{"contents":[{"role":"user","parts":[{"text":"hello"}]}]}`
	if code, b := call("POST", "/t/byo-gemini/gemini/v1beta/models/gemini-2.5-flash:generateContent?key="+byoGemKey, gem,
		"X-Gatekeeper-Key", byoKey, "content-type", "application/json"); code != 200 {
		t.Fatalf("gemini: %d %s", code, b)
	}

	// The credentials reached the provider, each as the agent sent it.
	var sawOAuth, sawGem int
	for _, r := range mock.Requests() {
		if r.Header.Get("Authorization") == "Bearer "+byoOAuth {
			sawOAuth++
		}
		if strings.Contains(r.RawQuery, "key="+byoGemKey) {
			sawGem++
		}
	}
	// The turn, the held call, the budget's first turn, models and count_tokens.
	if sawOAuth != 5 || sawGem != 1 {
		t.Fatalf("the provider saw the subscription token %d times and the Gemini key %d times", sawOAuth, sawGem)
	}

	// Everything gatekeeper shows or keeps.
	views := map[string]string{"approval": approval}
	for _, id := range []string{"byo-turn", "byo-held", "byo-budget", "byo-gemini"} {
		views["run "+id] = admin("GET", "/admin/v1/trajectories/"+id, "")
		views["events "+id] = admin("GET", "/admin/v1/trajectories/"+id+"/events", "")
	}
	views["runs"] = admin("GET", "/admin/v1/trajectories", "")
	views["approvals"] = admin("GET", "/admin/v1/approvals", "")
	views["keys"] = admin("GET", "/admin/v1/keys", "")
	_, views["metrics"] = call("GET", "/metrics", "")
	for i := 0; i < 300 && !strings.Contains(stream.String(), "byo-gemini"); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	stopStream()
	views["event stream"] = stream.String()
	// The log is written in batches: wait for the last request's line.
	for i := 0; i < 300 && !strings.Contains(gk.logs.String(), "byo-gemini"); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	views["log"] = gk.logs.String()
	views["redis"] = redisDump(t, ctx, srv.URL)

	// Each view holds what it should, so that the search below means something.
	for name, want := range map[string]string{"log": "pass-through", "event stream": "byo-held", "metrics": "gatekeeper_turns_total",
		"redis": "byo-budget", "events byo-held": "AWAITING_APPROVAL", "run byo-budget": "BUDGET_EXCEEDED"} {
		if !strings.Contains(views[name], want) {
			t.Errorf("%s holds no %q: the check would prove nothing\n%s", name, want, views[name])
		}
	}
	for name, text := range views {
		for _, secret := range []string{byoOAuth, byoGemKey} {
			for _, s := range traces(secret) {
				if strings.Contains(text, s) {
					t.Errorf("%s holds the forwarded credential %q (as %q)", name, secret, s)
				}
			}
		}
		if strings.Contains(text, byoKey) {
			t.Errorf("%s holds the virtual key", name)
		}
	}
}

// traces are the forms in which a credential could be found: whole,
// every run of 12 of its characters, its SHA-256 in hex and base64.
func traces(secret string) []string {
	sum := sha256.Sum256([]byte(secret))
	out := []string{hex.EncodeToString(sum[:]), base64.StdEncoding.EncodeToString(sum[:]), base64.RawURLEncoding.EncodeToString(sum[:])}
	for i := 0; i+12 <= len(secret); i++ {
		out = append(out, secret[i:i+12])
	}
	return out
}

// redisDump is every key in the Redis at url with its value, whatever its
// type, one per line.
func redisDump(t *testing.T, ctx context.Context, url string) string {
	t.Helper()
	opts, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(opts)
	defer rdb.Close()
	var b strings.Builder
	w := bufio.NewWriter(&b)
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	n := 0
	for iter.Next(ctx) && n < 100000 {
		n++
		key := iter.Val()
		typ, err := rdb.Type(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		var val any
		switch typ {
		case "string":
			val, err = rdb.Get(ctx, key).Result()
		case "hash":
			val, err = rdb.HGetAll(ctx, key).Result()
		case "list":
			val, err = rdb.LRange(ctx, key, 0, -1).Result()
		case "set":
			val, err = rdb.SMembers(ctx, key).Result()
		case "zset":
			val, err = rdb.ZRangeWithScores(ctx, key, 0, -1).Result()
		case "stream":
			val, err = rdb.XRange(ctx, key, "-", "+").Result()
		default:
			t.Fatalf("key %s has type %s, which the dump does not read", key, typ)
		}
		if err != nil && err != goredis.Nil {
			t.Fatalf("%s %s: %v", typ, key, err)
		}
		fmt.Fprintf(w, "%s %s %v\n", typ, key, val)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("Redis holds no key: the store was not used")
	}
	_ = w.Flush()
	return b.String()
}

// TestRealClaudeCodeForwardedCredential: Claude Code, unmodified, with a
// subscription's token (CLAUDE_CODE_OAUTH_TOKEN, as `claude setup-token`
// makes, which it sends with its oauth beta; or ANTHROPIC_AUTH_TOKEN) and
// naming its tenant with ANTHROPIC_CUSTOM_HEADERS, finishes a turn
// through a forward tenant: every request it made reached the provider
// with its own token (and its betas) and nothing of gatekeeper's, the run
// is its tenant's, and the token is not in gatekeeper's log.
func TestRealClaudeCodeForwardedCredential(t *testing.T) {
	bin, ok := agentBinary(t, "claude")
	if !ok {
		t.Skip("SKIPPED: claude is not on PATH; install it to run the real-client tests (see .ci/run)")
	}
	for _, tc := range []struct{ name, env, beta string }{
		{"oauth token", "CLAUDE_CODE_OAUTH_TOKEN", "oauth-2025-04-20"},
		{"auth token", "ANTHROPIC_AUTH_TOKEN", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mock := mockprovider.New(mockprovider.Options{})
			ms := httptest.NewServer(mock)
			t.Cleanup(ms.Close)
			gk := startReplica(t, byoConfig(t, ms.URL, ""))
			dir, home := t.TempDir(), t.TempDir()
			cmd := exec.Command(bin, "-p", "Say hello.", "--output-format", "stream-json", "--verbose", "--model", "claude-sonnet-4-5")
			cmd.Env = agentEnv(home,
				"ANTHROPIC_BASE_URL="+gk.base+"/t/byo-claude/anthropic",
				tc.env+"="+byoOAuth,
				"ANTHROPIC_CUSTOM_HEADERS=X-Gatekeeper-Key: "+byoKey,
				"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
				"IS_SANDBOX=1")
			p := startAgent(t, cmd, dir)
			waitAgent(t, p, "claude", 3*time.Minute, gk.logs)
			turns := providerTurns(t, "Claude Code", p, mock.Requests(), func(r mockprovider.RecordedRequest) {
				if r.Header.Get("Authorization") != "Bearer "+byoOAuth || r.Header.Get("X-Api-Key") != "" {
					t.Errorf("%s %s reached the provider with Authorization %q, x-api-key %q", r.Method, r.Path,
						r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"))
				}
				if tc.beta != "" && !strings.Contains(r.Header.Get("Anthropic-Beta"), tc.beta) {
					t.Errorf("%s %s reached the provider without its %s beta: %q", r.Method, r.Path, tc.beta, r.Header.Get("Anthropic-Beta"))
				}
			})
			var run struct {
				Tenant string `json:"tenant"`
				Turns  int    `json:"turns"`
			}
			if _, err := adminJSONAs(context.Background(), byoAdmin, "GET", gk.base+"/admin/v1/trajectories/byo-claude", &run); err != nil || run.Tenant != "byo" || run.Turns < 1 {
				t.Errorf("run byo-claude: %+v %v", run, err)
			}
			for i := 0; i < 300 && !strings.Contains(gk.logs.String(), "byo-claude"); i++ {
				time.Sleep(20 * time.Millisecond)
			}
			for _, s := range traces(byoOAuth) {
				if strings.Contains(gk.logs.String(), s) {
					t.Fatalf("gatekeeper's log holds the subscription token (as %q)", s)
				}
			}
			t.Logf("Claude Code made %d turns, each with its own token at the provider", turns)
		})
	}
}

// TestRealCodexForwardedCredential: Codex CLI, unmodified, on a custom
// provider with its own OpenAI API key (env_key) and the gatekeeper key in
// env_http_headers, finishes a turn through a forward tenant with its key
// at the provider and nothing of gatekeeper's.
func TestRealCodexForwardedCredential(t *testing.T) {
	bin, ok := agentBinary(t, "codex")
	if !ok {
		t.Skip("SKIPPED: codex is not on PATH; install it to run the real-client tests (see .ci/run)")
	}
	mock := mockprovider.New(mockprovider.Options{})
	ms := httptest.NewServer(mock)
	t.Cleanup(ms.Close)
	gk := startReplica(t, byoConfig(t, ms.URL, ""))
	dir, home := t.TempDir(), t.TempDir()
	cfg := fmt.Sprintf(`model = "gpt-5.1-codex"
model_provider = "gatekeeper"

[model_providers.gatekeeper]
name = "gatekeeper"
base_url = "%s/t/byo-codex/openai/v1"
wire_api = "responses"
env_key = "OPENAI_API_KEY"
env_http_headers = { "X-Gatekeeper-Key" = "GATEKEEPER_KEY" }
`, gk.base)
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "Say hello.")
	cmd.Env = agentEnv(home, "CODEX_HOME="+home, "OPENAI_API_KEY="+byoOAIKey, "GATEKEEPER_KEY="+byoKey)
	p := startAgent(t, cmd, dir)
	waitAgent(t, p, "codex", 3*time.Minute, gk.logs)
	providerTurns(t, "Codex", p, mock.Requests(), func(r mockprovider.RecordedRequest) {
		if r.Header.Get("Authorization") != "Bearer "+byoOAIKey {
			t.Errorf("%s %s reached the provider with Authorization %q", r.Method, r.Path, r.Header.Get("Authorization"))
		}
	})
	var run struct {
		Tenant string `json:"tenant"`
	}
	if _, err := adminJSONAs(context.Background(), byoAdmin, "GET", gk.base+"/admin/v1/trajectories/byo-codex", &run); err != nil || run.Tenant != "byo" {
		t.Errorf("run byo-codex: %+v %v", run, err)
	}
}

// TestRealGeminiCLIForwardedCredential: Gemini CLI, unmodified, with its
// own API key (GEMINI_API_KEY) and the gatekeeper key in
// GEMINI_CLI_CUSTOM_HEADERS, finishes a turn through a forward tenant with
// its key at the provider and nothing of gatekeeper's.
func TestRealGeminiCLIForwardedCredential(t *testing.T) {
	bin, ok := agentBinary(t, "gemini")
	if !ok {
		t.Skip("SKIPPED: gemini is not on PATH; install it to run the real-client tests (see .ci/run)")
	}
	mock := mockprovider.New(mockprovider.Options{})
	ms := httptest.NewServer(mock)
	t.Cleanup(ms.Close)
	gk := startReplica(t, byoConfig(t, ms.URL, ""))
	dir, home := t.TempDir(), t.TempDir()
	cmd := geminiRun(t, bin, agentTarget{base: gk.base, traj: "byo-gemini-cli", prompt: "Say hello."}, home)
	cmd.Args = []string{bin, "-p", "Say hello.", "--model", "gemini-2.5-flash", "--output-format", "json"}
	for i, kv := range cmd.Env {
		if strings.HasPrefix(kv, "GEMINI_API_KEY=") {
			cmd.Env[i] = "GEMINI_API_KEY=" + byoGemKey
		}
	}
	cmd.Env = append(cmd.Env, "GEMINI_CLI_CUSTOM_HEADERS=X-Gatekeeper-Key: "+byoKey)
	p := startAgent(t, cmd, dir)
	waitAgent(t, p, "gemini", 3*time.Minute, gk.logs)
	providerTurns(t, "Gemini CLI", p, mock.Requests(), func(r mockprovider.RecordedRequest) {
		if r.APIKey != byoGemKey {
			t.Errorf("%s %s reached the provider with key %q", r.Method, r.Path, r.APIKey)
		}
	})
}

// waitAgent waits up to d for the agent p to exit; its failure, or its
// running past d, fails the test with its output and gatekeeper's log.
func waitAgent(t *testing.T, p *agentProc, name string, d time.Duration, gkLogs *syncBuffer) {
	t.Helper()
	select {
	case <-p.exited:
		if p.err != nil {
			t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s\ngatekeeper:\n%s", name, p.err, tail(p.stdout.String()), tail(p.stderr.String()), tail(gkLogs.String()))
		}
	case <-time.After(d):
		t.Fatalf("%s did not finish in %v\nstdout:\n%s\ngatekeeper:\n%s", name, d, tail(p.stdout.String()), tail(gkLogs.String()))
	}
}

// providerTurns checks each request the provider received with check (the
// agent's own credential, as it sent it) and that no X-Gatekeeper header
// reached the provider; an agent that made no turn at all fails the test
// with its output. It returns the turns.
func providerTurns(t *testing.T, agent string, p *agentProc, reqs []mockprovider.RecordedRequest, check func(r mockprovider.RecordedRequest)) int {
	t.Helper()
	turns := 0
	for _, r := range reqs {
		check(r)
		for k := range r.Header {
			if strings.HasPrefix(strings.ToLower(k), "x-gatekeeper") {
				t.Errorf("%s reached the provider", k)
			}
		}
		if r.API != "" {
			turns++
		}
	}
	if turns == 0 {
		t.Fatalf("%s made no turn through gatekeeper\nstdout:\n%s\nstderr:\n%s", agent, tail(p.stdout.String()), tail(p.stderr.String()))
	}
	return turns
}
