package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"gatekeeper/internal/gkproc"
	"gatekeeper/internal/testidp"
)

// TestLoginEndToEnd signs a person in with the shipped binary's `login`
// against a real OIDC provider on loopback (the code approved through the
// provider's own verification page), hands the token to an agent's SDK
// through `login -print-token`, and follows the run to the record under the
// person's name; then refresh, a disabled person and logout.
func TestLoginEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	idp, err := testidp.Start(testidp.Options{AccessTokenLifetime: 10 * time.Minute},
		testidp.User{Subject: "ada", Name: "Ada Lovelace", Email: "ada@example.com", Groups: []string{"eng"}})
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()

	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	const adminTok = "login-test-admin-token-0001"
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
log: {format: json}
providers:
  - {name: anthropic, api: anthropic, base_url: mock, default: true, keys: [{name: k, key: not-a-real-key}]}
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

	loginFile := filepath.Join(dir, "home", "gatekeeper", "login.json")
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "XDG_CONFIG_HOME=" + filepath.Join(dir, "home"),
		"GATEKEEPER_ISSUER=" + idp.Issuer(), "GATEKEEPER_CLIENT_ID=" + testidp.ClientID}
	cli := func(args ...string) (string, string, error) {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}

	// login: the code it prints is approved on the provider's page.
	said := cliLogin(t, ctx, bin, env, "ada")
	if !strings.Contains(said, "signed in as ada@example.com") {
		t.Errorf("login said:\n%s", said)
	}
	st, err := os.Stat(loginFile)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("the sign-in file's mode is %v, want 0600", st.Mode().Perm())
	}

	// -print-token hands the agent a key gatekeeper admits as the person.
	out, errs, err := cli("login", "-print-token")
	if err != nil {
		t.Fatalf("print-token: %v %s", err, errs)
	}
	token := strings.TrimSpace(out)
	c := anthropic.NewClient(option.WithBaseURL(gk.Base+"/t/ada-run/anthropic"), option.WithAPIKey(token), option.WithMaxRetries(0))
	if _, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 128,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}}); err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Tenant string `json:"tenant"`
		Turns  int    `json:"turns"`
		Person struct {
			Subject, Email string
			Groups         []string
		} `json:"person"`
	}
	for i := 0; i < 100 && rec.Turns == 0; i++ {
		req, _ := http.NewRequestWithContext(ctx, "GET", gk.Base+"/admin/v1/trajectories/fleet/ada-run", nil)
		req.Header.Set("Authorization", "Bearer "+adminTok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.NewDecoder(resp.Body).Decode(&rec); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		time.Sleep(50 * time.Millisecond)
	}
	if rec.Turns != 1 || rec.Tenant != "fleet" || rec.Person.Subject != "ada" || rec.Person.Email != "ada@example.com" || len(rec.Person.Groups) != 1 {
		t.Fatalf("record %+v", rec)
	}

	// A token near its expiry is refreshed, and the new tokens kept.
	expire := func() {
		t.Helper()
		b, err := os.ReadFile(loginFile)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		tok, ok := m["token"].(map[string]any)
		if !ok {
			t.Fatalf("the sign-in file holds no token: %s", b)
		}
		tok["expiry"] = time.Now().Add(30 * time.Second).Format(time.RFC3339)
		b, _ = json.Marshal(m)
		if err := os.WriteFile(loginFile, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	expire()
	out, errs, err = cli("login", "-print-token")
	if err != nil {
		t.Fatalf("print-token after expiry: %v %s", err, errs)
	}
	if fresh := strings.TrimSpace(out); fresh == token || fresh == "" {
		t.Fatal("a token about to expire was not refreshed")
	}
	if out2, _, _ := cli("login", "-print-token"); strings.TrimSpace(out2) != strings.TrimSpace(out) {
		t.Error("a valid token was refreshed again instead of reused")
	}

	// A disabled person's refresh fails: print-token says to sign in again.
	idp.Disable("ada")
	expire()
	if _, errs, err = cli("login", "-print-token"); err == nil || !strings.Contains(errs, "run gatekeeper login") {
		t.Fatalf("print-token for a disabled person: %v %s", err, errs)
	}

	// logout forgets the sign-in.
	if _, errs, err = cli("logout"); err != nil {
		t.Fatalf("logout: %v %s", err, errs)
	}
	if _, err := os.Stat(loginFile); !os.IsNotExist(err) {
		t.Fatalf("the sign-in file is still there: %v", err)
	}
	if _, errs, err = cli("login", "-print-token"); err == nil || !strings.Contains(errs, "not signed in") {
		t.Fatalf("print-token after logout: %v %s", err, errs)
	}
}

// cliLogin runs the binary's `login` with env and approves the code it
// prints on the provider's verification page as user; it returns what
// login said.
func cliLogin(t *testing.T, ctx context.Context, bin string, env []string, user string) string {
	t.Helper()
	login := exec.CommandContext(ctx, bin, "login")
	login.Env = env
	stderr, err := login.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := login.Start(); err != nil {
		t.Fatal(err)
	}
	defer login.Process.Kill()
	sc := bufio.NewScanner(stderr)
	code := regexp.MustCompile(`open (\S+) and enter the code (\S+)`)
	var page, userCode string
	var said strings.Builder
	for page == "" && sc.Scan() {
		said.WriteString(sc.Text() + "\n")
		if m := code.FindStringSubmatch(sc.Text()); m != nil {
			page, userCode = m[1], m[2]
		}
	}
	if page == "" {
		t.Fatalf("login printed no code:\n%s", said.String())
	}
	resp, err := http.PostForm(page, url.Values{"user_code": {userCode}, "user": {user}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("approving on the provider's page: %s", resp.Status)
	}
	rest, _ := io.ReadAll(stderr)
	said.Write(rest)
	if err := login.Wait(); err != nil {
		t.Fatalf("login: %v\n%s", err, said.String())
	}
	return said.String()
}
