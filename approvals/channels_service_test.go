package approvals_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/internal/redistest"
	"gatekeeper/store/memory"
	redisstore "gatekeeper/store/redis"
)

// The channels end to end over the memory store and a real Service: a
// request opened by the Service is posted to a loopback stand-in for
// Slack's Web API and delivered to a loopback webhook receiver; button
// presses signed like Slack's cast votes through the Service; the decision
// updates the same Slack message and is delivered to the webhook.

const e2eSigningSecret = "e2e-signing-secret-0123456789abcdef"

var e2eWebhookSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("e2e-webhook-key-0123456789"))

type e2eSlack struct {
	mu    sync.Mutex
	calls []map[string]any // method → body, with "method" added
}

func (s *e2eSlack) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	method := strings.TrimPrefix(r.URL.Path, "/api/")
	body["method"] = method
	s.mu.Lock()
	s.calls = append(s.calls, body)
	s.mu.Unlock()
	ts, _ := body["ts"].(string)
	if method == "chat.postMessage" {
		ts = "1700000000.000100"
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "channel": "C0APPROVE", "ts": ts})
}

func (s *e2eSlack) snapshot() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.calls...)
}

type e2eHook struct {
	mu     sync.Mutex
	events []string // type of every verified delivery
	bad    int
	ref    *standardwebhooks.Webhook
}

func (h *e2eHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	ok := h.ref.Verify(raw, r.Header) == nil &&
		approvals.VerifyWebhook(e2eWebhookSecret, r.Header, raw, time.Now()) == nil
	var ev struct{ Type string }
	_ = json.Unmarshal(raw, &ev)
	h.mu.Lock()
	if ok {
		h.events = append(h.events, ev.Type)
	} else {
		h.bad++
	}
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (h *e2eHook) snapshot() ([]string, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.events...), h.bad
}

// eventually polls cond every 10 ms, at most 500 times (5 s).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("gave up waiting for %s", what)
}

func press(t *testing.T, h http.Handler, user, action, id string, ts time.Time, secret string) (int, string) {
	t.Helper()
	payload, _ := json.Marshal(map[string]any{
		"type": "block_actions", "user": map[string]any{"id": user},
		"actions": []any{map[string]any{"action_id": action, "value": id, "type": "button"}},
	})
	body := []byte(url.Values{"payload": {string(payload)}}.Encode())
	stamp := strconv.FormatInt(ts.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + stamp + ":"))
	mac.Write(body)
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, approvals.SlackInteractionsPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Slack-Request-Timestamp", stamp)
	req.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var e struct{ Text string }
	_ = json.Unmarshal(rec.Body.Bytes(), &e)
	return rec.Code, e.Text
}

func TestChannelsWithService(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		channelsWithService(t, memory.NewApprovals(memory.ApprovalsOptions{}))
	})
	// The replay guard is shared by replicas only when the store is.
	t.Run("redis", func(t *testing.T) {
		o, err := goredis.ParseURL(redistest.Start(t))
		if err != nil {
			t.Fatal(err)
		}
		client := goredis.NewClient(o)
		t.Cleanup(func() { _ = client.Close() })
		channelsWithService(t, redisstore.NewApprovals(redisstore.ApprovalsOptions{Client: client}))
	})
}

func channelsWithService(t *testing.T, st approvals.Store) {
	slackAPI := &e2eSlack{}
	apiSrv := httptest.NewServer(slackAPI)
	t.Cleanup(apiSrv.Close)
	ref, err := standardwebhooks.NewWebhook(e2eWebhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	hook := &e2eHook{ref: ref}
	hookSrv := httptest.NewServer(hook)
	t.Cleanup(hookSrv.Close)

	cfg := config.Approvals{
		Slack: &config.Slack{BotToken: "xoxb-e2e", SigningSecret: e2eSigningSecret, Channel: "C0APPROVE",
			APIURL: apiSrv.URL + "/api", Users: []config.SlackUser{
				{SlackID: "UCAROL", Name: "carol", Roles: []string{"secops"}},
				{SlackID: "UDAVE", Name: "dave", Roles: []string{"sre"}},
			}},
		Webhook: &config.Webhook{URL: hookSrv.URL, Secret: e2eWebhookSecret},
	}
	notifiers, slack, err := approvals.Channels(cfg, st, nil)
	if err != nil || slack == nil || len(notifiers) != 2 {
		t.Fatalf("Channels: %d notifiers, slack %v, err %v", len(notifiers), slack != nil, err)
	}
	gates, err := approvals.Compile([]config.Gate{{
		Name: "destructive-shell", When: `tool.name == "Bash"`,
		Approvers: config.Approvers{Roles: []string{"secops", "sre"}, Quorum: 2, DistinctRoles: true},
		Expiry:    config.Duration(15 * time.Minute),
	}})
	if err != nil {
		t.Fatal(err)
	}
	svc := approvals.NewService(approvals.ServiceOptions{Store: st, Gates: gates, Notifiers: notifiers})
	t.Cleanup(func() { _ = svc.Close(t.Context()) })
	handler := slack.Handler(svc)

	gate, _ := gates.Lookup("destructive-shell")
	call, err := approvals.Canonical("Bash", []byte(`{"command":"rm -rf /srv/data"}`))
	if err != nil {
		t.Fatal(err)
	}
	req := gate.Request("", call, `tool.name == "Bash"`, time.Now())
	if _, err := svc.Open(t.Context(), &approvals.Hold{Trajectory: "trj_e2e", Root: "trj_e2e", Tenant: "team-a",
		Key: "turn-1"}, []*approvals.Request{req}); err != nil {
		t.Fatal(err)
	}
	id := req.ID
	eventually(t, "the Slack message's ts on the request", func() bool {
		r, err := st.Get(t.Context(), id)
		return err == nil && r.Channels[approvals.SlackTSKey] == "1700000000.000100"
	})

	// Refused presses change nothing.
	if code, _ := press(t, handler, "UCAROL", "approve", id, time.Now(), "not-the-secret"); code != http.StatusUnauthorized {
		t.Errorf("bad signature: %d", code)
	}
	if code, _ := press(t, handler, "UCAROL", "approve", id, time.Now().Add(-6*time.Minute), e2eSigningSecret); code != http.StatusUnauthorized {
		t.Errorf("stale timestamp: %d", code)
	}
	if _, text := press(t, handler, "UMALLORY", "approve", id, time.Now(), e2eSigningSecret); !strings.Contains(text, "not an approver") {
		t.Errorf("unmapped user: %q", text)
	}
	if r, _ := st.Get(t.Context(), id); len(r.Votes) != 0 || r.State != approvals.Pending {
		t.Fatalf("after refused presses: state %s votes %+v", r.State, r.Votes)
	}

	// carol then dave: the quorum of two distinct roles.
	at := time.Now()
	if _, text := press(t, handler, "UCAROL", "approve", id, at, e2eSigningSecret); !strings.Contains(text, "(1 of 2)") {
		t.Errorf("carol: %q", text)
	}
	if code, text := press(t, handler, "UCAROL", "approve", id, at, e2eSigningSecret); code != http.StatusOK ||
		!strings.Contains(text, "already handled") {
		t.Errorf("replayed delivery: %d %q", code, text)
	}
	if r, _ := st.Get(t.Context(), id); len(r.Votes) != 1 {
		t.Fatalf("after the replay: votes %+v", r.Votes)
	}
	if _, text := press(t, handler, "UDAVE", "approve", id, time.Now(), e2eSigningSecret); !strings.Contains(text, "approved") {
		t.Errorf("dave: %q", text)
	}
	r, _ := st.Get(t.Context(), id)
	if r.State != approvals.Approved || len(r.Votes) != 2 {
		t.Fatalf("state %s votes %d, want approved by two", r.State, len(r.Votes))
	}

	eventually(t, "the in-place update", func() bool {
		calls := slackAPI.snapshot()
		return len(calls) == 2 && calls[1]["method"] == "chat.update"
	})
	up := slackAPI.snapshot()[1]
	if up["ts"] != "1700000000.000100" || up["channel"] != "C0APPROVE" {
		t.Errorf("update of %v/%v, want the posted message", up["channel"], up["ts"])
	}
	if b, _ := json.Marshal(up["blocks"]); !strings.Contains(string(b), "Approved by carol, dave") ||
		strings.Contains(string(b), `"actions"`) {
		t.Errorf("updated blocks: %s", b)
	}
	eventually(t, "both webhook deliveries", func() bool {
		ev, _ := hook.snapshot()
		return len(ev) == 2
	})
	ev, bad := hook.snapshot()
	if ev[0] != approvals.EventRequested || ev[1] != approvals.EventDecided || bad != 0 {
		t.Errorf("webhook events %v, %d unverified", ev, bad)
	}
}
