package admin_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/admin"
	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/internal/redistest"
	"gatekeeper/store/memory"
	redisstore "gatekeeper/store/redis"
)

const (
	erinLaptop       = "erin-laptop-token-0123456789"
	erinCI           = "erin-ci-token-0123456789"
	peopleSigningKey = "people-signing-secret-0123456789"
)

// One person voting through the admin API and through Slack counts once,
// on the memory and the Redis store: the second vote is a repeat (409
// from the admin API, "already voted" in Slack), and the quorum of two
// needs a second person.
func TestApproverOneIdentityAcrossChannels(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		oneIdentity(t, memory.NewApprovals(memory.ApprovalsOptions{}))
	})
	t.Run("redis", func(t *testing.T) {
		o, err := goredis.ParseURL(redistest.Start(t))
		if err != nil {
			t.Fatal(err)
		}
		client := goredis.NewClient(o)
		t.Cleanup(func() { _ = client.Close() })
		oneIdentity(t, redisstore.NewApprovals(redisstore.ApprovalsOptions{Client: client}))
	})
}

func oneIdentity(t *testing.T, st approvals.Store) {
	cfg := testConfig(t)
	cfg.Admin.Tokens = append(cfg.Admin.Tokens,
		config.AdminToken{Name: "erin-laptop", Token: erinLaptop, Roles: []string{"approver:secops"}},
		// A token of erin's without an approver role: it votes as erin,
		// with erin's roles.
		config.AdminToken{Name: "erin-ci", Token: erinCI, Roles: []string{"operator"}})
	cfg.Approvals.People = []config.Person{
		{Name: "erin", AdminTokens: []string{"erin-laptop", "erin-ci"}, SlackID: "UERIN", Roles: []string{"secops"}},
		{Name: "frank", SlackID: "UFRANK", Roles: []string{"sre"}},
	}
	cfg.Approvals.Slack = &config.Slack{BotToken: "xoxb-people", SigningSecret: peopleSigningKey, Channel: "C1",
		APIURL: "http://127.0.0.1:1/api"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	_, slack, err := approvals.Channels(cfg.Approvals, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc := approvals.NewService(approvals.ServiceOptions{Store: st})
	t.Cleanup(func() { _ = svc.Close(t.Context()) })
	hooks := slack.Handler(svc)
	r := chi.NewRouter()
	admin.New(cfg, memory.New(memory.Options{}), nil, nil, admin.WithApprovals(svc)).Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)

	open := func(key string) string {
		c, _ := approvals.Canonical("Bash", []byte(`{"command":"rm -rf /srv/`+key+`"}`))
		req := &approvals.Request{Call: c, Digest: c.Digest(), Gate: "g", Roles: []string{"secops", "sre"}, Quorum: 2,
			ExpiresAt: time.Now().Add(15 * time.Minute)}
		if _, err := svc.Open(t.Context(), &approvals.Hold{Trajectory: "run-" + key, Root: "run-" + key, Key: key}, []*approvals.Request{req}); err != nil {
			t.Fatal(err)
		}
		return req.ID
	}
	votes := func(id string) []approvals.Vote {
		r, err := st.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return r.Votes
	}

	// Admin API first, then Slack, then another of erin's tokens.
	a := open("a")
	if code, out := call(t, "POST", srv.URL+"/admin/v1/approvals/"+a+"/approve", erinLaptop, ""); code != 200 {
		t.Fatalf("erin's first vote: %d %v", code, out)
	}
	if v := votes(a); len(v) != 1 || v[0].Approver != "erin" || v[0].Credential != "admin token erin-laptop" || v[0].Roles[0] != "secops" {
		t.Fatalf("votes %+v", v)
	}
	if text := slackPress(t, hooks, "UERIN", a); !strings.Contains(text, "already voted") {
		t.Errorf("erin again through Slack: %q", text)
	}
	if code, out := call(t, "POST", srv.URL+"/admin/v1/approvals/"+a+"/approve", erinCI, ""); code != 409 {
		t.Errorf("erin again with another token: %d %v", code, out)
	}
	if v := votes(a); len(v) != 1 {
		t.Fatalf("a repeat was counted: %+v", v)
	}
	if text := slackPress(t, hooks, "UFRANK", a); !strings.Contains(text, "approved") {
		t.Errorf("frank: %q", text)
	}
	if r, _ := st.Get(t.Context(), a); r.State != approvals.Approved || len(r.Votes) != 2 {
		t.Errorf("state %s votes %+v, want approved by two people", r.State, r.Votes)
	}

	// Slack first, then the admin API.
	b := open("b")
	if text := slackPress(t, hooks, "UERIN", b); !strings.Contains(text, "(1 of 2)") {
		t.Fatalf("erin through Slack: %q", text)
	}
	code, out := call(t, "POST", srv.URL+"/admin/v1/approvals/"+b+"/approve", erinCI, "")
	if code != 409 || !strings.Contains(out["error"].(map[string]any)["message"].(string), "already voted") {
		t.Errorf("erin again through the admin API: %d %v", code, out)
	}
	if v := votes(b); len(v) != 1 || v[0].Approver != "erin" || v[0].Via != approvals.ViaSlack || v[0].Credential != "slack user UERIN" {
		t.Errorf("votes %+v", v)
	}

	// The same person through every credential at once: one vote counts.
	c := open("c")
	people := approvals.NewDirectory(cfg.Approvals)
	slackErin, _ := people.Slack("UERIN")
	as := []approvals.Approver{people.Admin("erin-laptop", nil), people.Admin("erin-ci", nil), slackErin}
	var wg sync.WaitGroup
	errs := make(chan error, 3*len(as))
	for i := range 3 * len(as) {
		who := as[i%len(as)]
		wg.Go(func() {
			_, err := svc.Vote(t.Context(), c, approvals.Vote{Approver: who.Name, Roles: who.Roles, Approve: true, Credential: who.Credential})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	ok, repeats := 0, 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, approvals.ErrAlreadyVoted):
			repeats++
		default:
			t.Errorf("vote: %v", err)
		}
	}
	if v := votes(c); ok != 1 || repeats != 3*len(as)-1 || len(v) != 1 {
		t.Errorf("%d votes counted, %d repeats, %d stored; want one", ok, repeats, len(v))
	}
}

// slackPress presses Approve on request id as the Slack user, signed as
// Slack signs, and returns the answer's text.
func slackPress(t *testing.T, h http.Handler, user, id string) string {
	t.Helper()
	payload, _ := json.Marshal(map[string]any{
		"type": "block_actions", "user": map[string]any{"id": user},
		"actions": []any{map[string]any{"action_id": "approve", "value": id, "type": "button"}},
	})
	body := []byte(url.Values{"payload": {string(payload)}}.Encode())
	stamp := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, []byte(peopleSigningKey))
	mac.Write([]byte("v0:" + stamp + ":"))
	mac.Write(body)
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, approvals.SlackInteractionsPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Slack-Request-Timestamp", stamp)
	req.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var e struct{ Text string }
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("Slack answer %d %q: %v", rec.Code, rec.Body.String(), err)
	}
	return e.Text
}
