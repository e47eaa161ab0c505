package approvals

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gatekeeper/config"
)

// chanPayload is a block_actions payload as Slack posts it (trimmed to
// what a delivery of a button press carries that matters here).
func chanPayload(user, action, value, responseURL string) []byte {
	p := map[string]any{
		"type":         "block_actions",
		"user":         map[string]any{"id": user, "username": "someone", "team_id": "T1"},
		"api_app_id":   "A1",
		"container":    map[string]any{"type": "message", "message_ts": "1700000000.000101", "channel_id": "C0APPROVE"},
		"trigger_id":   "123.456.abc",
		"channel":      map[string]any{"id": "C0APPROVE", "name": "approvals"},
		"response_url": responseURL,
		"actions": []any{map[string]any{
			"action_id": action, "block_id": "vote", "value": value, "type": "button",
			"action_ts": "1700000001.000200", "text": map[string]any{"type": "plain_text", "text": "Approve"},
		}},
	}
	raw, _ := json.Marshal(p)
	return []byte(url.Values{"payload": {string(raw)}}.Encode())
}

// chanSign returns the headers Slack sends with body at ts.
func chanSign(secret string, ts int64, body []byte) http.Header {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + strconv.FormatInt(ts, 10) + ":"))
	mac.Write(body)
	h := http.Header{}
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	h.Set("X-Slack-Request-Timestamp", strconv.FormatInt(ts, 10))
	h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	return h
}

// chanPost delivers body with h to handler and returns the answer.
func chanPost(t *testing.T, handler http.Handler, h http.Header, body []byte) (int, ephemeral) {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/hooks/slack/interactions", bytes.NewReader(body))
	req.Header = h
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	var e ephemeral
	if rec.Code == http.StatusOK && rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
			t.Fatalf("answer %q is not JSON: %v", rec.Body, err)
		}
		if e.ResponseType != "ephemeral" || e.ReplaceOriginal {
			t.Errorf("answer %+v, want an ephemeral that keeps the original", e)
		}
	}
	return rec.Code, e
}

// chanVoter records votes and applies them to a chanStore the way the
// Service does (Cast inside Update).
type chanVoter struct {
	st    *chanStore
	now   time.Time
	mu    sync.Mutex
	calls int
	err   error // returned instead of voting when set
}

func (v *chanVoter) Vote(ctx context.Context, id string, vote Vote) (*Request, error) {
	v.mu.Lock()
	v.calls++
	err := v.err
	v.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		return nil, errors.New("vote without a deadline")
	}
	return v.st.Update(ctx, id, func(r *Request) error {
		_, err := r.Cast(vote, v.now)
		return err
	})
}

type chanFixture struct {
	api     *slackAPI
	st      *chanStore
	slack   *Slack
	voter   *chanVoter
	handler http.Handler
}

func newChanFixture(t *testing.T) *chanFixture {
	t.Helper()
	f := &chanFixture{api: newSlackAPI(t), st: newChanStore(t)}
	f.st.put(t, chanRequest(t, "apr_vote"))
	f.slack = newChanSlack(t, f.api, f.st, &chanWaits{})
	f.voter = &chanVoter{st: f.st, now: chanNow}
	f.handler = f.slack.Handler(f.voter)
	return f
}

func (f *chanFixture) votes(t *testing.T) []Vote {
	t.Helper()
	r, err := f.st.Get(t.Context(), "apr_vote")
	if err != nil {
		t.Fatal(err)
	}
	return r.Votes
}

func TestSlackInteractionCastsVote(t *testing.T) {
	f := newChanFixture(t)
	body := chanPayload("UCAROL", "approve", "apr_vote", f.api.srv.URL+"/response")
	code, ans := chanPost(t, f.handler, chanSign(chanSigningSecret, chanNow.Unix(), body), body)
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	votes := f.votes(t)
	if len(votes) != 1 || votes[0].Approver != "carol" || !votes[0].Approve || votes[0].Via != ViaSlack ||
		!votes[0].At.Equal(chanNow) || strings.Join(votes[0].Roles, ",") != "secops" {
		t.Fatalf("votes = %+v, want carol's approval via slack", votes)
	}
	if ans.Text != "Your approval of apr_vote is recorded (1 of 2)." {
		t.Errorf("answer = %q", ans.Text)
	}
	if fu := f.api.FollowUps(); len(fu) != 1 || !strings.Contains(fu[0], "recorded (1 of 2)") {
		t.Errorf("response_url posts = %q, want the outcome once", fu)
	}

	// The second role decides.
	body = chanPayload("UDAVE", "approve", "apr_vote", "")
	_, ans = chanPost(t, f.handler, chanSign(chanSigningSecret, chanNow.Unix(), body), body)
	if ans.Text != "You approved apr_vote: the request is approved." {
		t.Errorf("answer = %q", ans.Text)
	}
}

func TestSlackInteractionDeny(t *testing.T) {
	f := newChanFixture(t)
	body := chanPayload("UDAVE", "deny", "apr_vote", "")
	_, ans := chanPost(t, f.handler, chanSign(chanSigningSecret, chanNow.Unix(), body), body)
	r, _ := f.st.Get(t.Context(), "apr_vote")
	if r.State != Denied || len(r.Votes) != 1 || r.Votes[0].Approve {
		t.Fatalf("state %s votes %+v, want denied by dave", r.State, r.Votes)
	}
	if ans.Text != "You denied apr_vote: the call will not be delivered." {
		t.Errorf("answer = %q", ans.Text)
	}
}

func TestSlackInteractionRefused(t *testing.T) {
	good := chanPayload("UCAROL", "approve", "apr_vote", "")
	tests := []struct {
		name     string
		body     []byte
		header   func(body []byte) http.Header
		wantCode int
		wantText string
	}{
		{"bad signature", good, func(b []byte) http.Header {
			return chanSign("another-secret", chanNow.Unix(), b)
		}, http.StatusUnauthorized, ""},
		{"tampered body", good, func(b []byte) http.Header {
			return chanSign(chanSigningSecret, chanNow.Unix(), chanPayload("UCAROL", "approve", "apr_other", ""))
		}, http.StatusUnauthorized, ""},
		{"no signature", good, func(b []byte) http.Header {
			h := chanSign(chanSigningSecret, chanNow.Unix(), b)
			h.Del("X-Slack-Signature")
			return h
		}, http.StatusUnauthorized, ""},
		{"stale timestamp", good, func(b []byte) http.Header {
			return chanSign(chanSigningSecret, chanNow.Add(-5*time.Minute-time.Second).Unix(), b)
		}, http.StatusUnauthorized, ""},
		{"future timestamp", good, func(b []byte) http.Header {
			return chanSign(chanSigningSecret, chanNow.Add(6*time.Minute).Unix(), b)
		}, http.StatusUnauthorized, ""},
		{"signed timestamp replaced", good, func(b []byte) http.Header {
			h := chanSign(chanSigningSecret, chanNow.Add(-time.Hour).Unix(), b)
			h.Set("X-Slack-Request-Timestamp", strconv.FormatInt(chanNow.Unix(), 10))
			return h
		}, http.StatusUnauthorized, ""},
		{"unmapped user", chanPayload("UMALLORY", "approve", "apr_vote", ""), func(b []byte) http.Header {
			return chanSign(chanSigningSecret, chanNow.Unix(), b)
		}, http.StatusOK, "You are not an approver: your Slack user is not mapped to one in gatekeeper's config."},
		{"mapped user without the gate's role", chanPayload("UERIN", "approve", "apr_vote", ""), func(b []byte) http.Header {
			return chanSign(chanSigningSecret, chanNow.Unix(), b)
		}, http.StatusOK, "You are not an approver of this request's gate: none of your roles is one it requires."},
		{"unknown action", chanPayload("UCAROL", "escalate", "apr_vote", ""), func(b []byte) http.Header {
			return chanSign(chanSigningSecret, chanNow.Unix(), b)
		}, http.StatusOK, ""},
		{"oversize body", append(good, bytes.Repeat([]byte("a"), SlackMaxBody)...), func(b []byte) http.Header {
			return chanSign(chanSigningSecret, chanNow.Unix(), b)
		}, http.StatusRequestEntityTooLarge, ""},
		{"not a form", []byte("payload=%zz"), func(b []byte) http.Header {
			return chanSign(chanSigningSecret, chanNow.Unix(), b)
		}, http.StatusBadRequest, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newChanFixture(t)
			code, ans := chanPost(t, f.handler, tc.header(tc.body), tc.body)
			if code != tc.wantCode {
				t.Fatalf("status %d, want %d", code, tc.wantCode)
			}
			if ans.Text != tc.wantText {
				t.Errorf("answer %q, want %q", ans.Text, tc.wantText)
			}
			if votes := f.votes(t); len(votes) != 0 {
				t.Errorf("votes = %+v, want none", votes)
			}
		})
	}
}

func TestSlackInteractionReplayChangesNothing(t *testing.T) {
	f := newChanFixture(t)
	body := chanPayload("UCAROL", "approve", "apr_vote", "")
	h := chanSign(chanSigningSecret, chanNow.Unix(), body)
	if code, _ := chanPost(t, f.handler, h.Clone(), body); code != http.StatusOK {
		t.Fatalf("first delivery: status %d", code)
	}
	before := f.votes(t)
	code, ans := chanPost(t, f.handler, h.Clone(), body)
	if code != http.StatusOK || ans.Text != "This button press was already handled." {
		t.Fatalf("replay: status %d answer %q", code, ans.Text)
	}
	if after := f.votes(t); len(after) != 1 || len(before) != 1 {
		t.Errorf("votes before %d after %d, want 1 and 1", len(before), len(after))
	}
	if f.voter.calls != 1 {
		t.Errorf("voter called %d times, want once", f.voter.calls)
	}
}

func TestSlackInteractionOutcomes(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{ErrAlreadyVoted, "You have already voted on this request (here or through the admin API)."},
		{ErrExpired, "This request has expired: the call was not delivered."},
		{ErrDecided, "This request is already decided."},
		{ErrNotFound, "No such approval request."},
		{context.DeadlineExceeded, "Your vote may not have been recorded in time: check the message, and press again if it is still pending."},
		{errors.New("store down"), "Your vote could not be recorded: press again in a moment."},
	}
	for _, tc := range tests {
		t.Run(tc.err.Error(), func(t *testing.T) {
			f := newChanFixture(t)
			f.voter.err = tc.err
			body := chanPayload("UCAROL", "approve", "apr_vote", "")
			code, ans := chanPost(t, f.handler, chanSign(chanSigningSecret, chanNow.Unix(), body), body)
			if code != http.StatusOK || ans.Text != tc.want {
				t.Errorf("status %d answer %q, want 200 %q", code, ans.Text, tc.want)
			}
		})
	}
}

func TestSlackFollowUpOnlyToSlackHosts(t *testing.T) {
	f := newChanFixture(t)
	for u, want := range map[string]bool{
		"https://hooks.slack.com/actions/T1/1/abc": true,
		f.api.srv.URL + "/response":                true,
		"http://hooks.slack.com/actions/T1/1/abc":  false,
		"https://evil.example/hooks.slack.com":     false,
		"https://hooks.slack.com.evil.example/x":   false,
		"::not a url":                              false,
	} {
		if got := f.slack.slackHost(u); got != want {
			t.Errorf("slackHost(%q) = %v, want %v", u, got, want)
		}
	}
}

func TestChannelsLogNoSecret(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	api := newSlackAPI(t)
	st := newChanStore(t)
	st.put(t, chanRequest(t, "apr_vote"))
	s := NewSlack(api.config(), st, WithSlackClock(func() time.Time { return chanNow }),
		WithSlackWait((&chanWaits{}).wait), WithSlackLogger(logger))
	h := s.Handler(&chanVoter{st: st, now: chanNow})

	good := chanPayload("UCAROL", "approve", "apr_vote", "")
	chanPost(t, h, chanSign("wrong", chanNow.Unix(), good), good)
	chanPost(t, h, chanSign(chanSigningSecret, chanNow.Unix(), good), good)
	chanPost(t, h, chanSign(chanSigningSecret, chanNow.Unix(), good), good)
	unmapped := chanPayload("UMALLORY", "deny", "apr_vote", "")
	chanPost(t, h, chanSign(chanSigningSecret, chanNow.Unix(), unmapped), unmapped)
	api.answer(func(w http.ResponseWriter) { _, _ = w.Write([]byte(`{"ok":false,"error":"invalid_auth"}`)) })
	if err := s.Announce(t.Context(), chanRequest(t, "apr_vote")); err != nil {
		logger.Error("announce failed", "err", err)
	}

	hookURL := "http://127.0.0.1:1/hooks/T0000/B0000/capability-in-the-path"
	wh, err := NewWebhook(config.Webhook{URL: hookURL, Secret: chanWebhookSecret},
		WithWebhookLogger(logger), WithWebhookWait((&chanWaits{}).wait))
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Announce(t.Context(), chanRequest(t, "apr_vote")); err != nil {
		logger.Error("webhook failed", "err", err)
	}

	out := buf.String()
	if !strings.Contains(out, "slack interaction refused") || !strings.Contains(out, "webhook delivery failed") {
		t.Fatalf("the log lacks the expected lines:\n%s", out)
	}
	for _, secret := range []string{chanBotToken, chanSigningSecret, strings.TrimPrefix(chanWebhookSecret, "whsec_"),
		"capability-in-the-path"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log carries %q:\n%s", secret, out)
		}
	}
}

// TestSlackVoteOutsideThePersonsTenants: a person scoped to other tenants
// (approvals.people[].tenants) pressing a button of team-a's request is
// told there is no such request, and no vote is cast; scoped to team-a,
// the same press counts.
func TestSlackVoteOutsideThePersonsTenants(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tenants []string
		want    string
		votes   int
	}{
		{"other tenant", []string{"team-b"}, "No such approval request.", 0},
		{"own tenant", []string{"team-b", "team-a"}, "Your approval of apr_vote is recorded (1 of 2).", 1},
		{"every tenant", nil, "Your approval of apr_vote is recorded (1 of 2).", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newChanFixture(t)
			cfg := f.api.config()
			cfg.Users = nil
			people := NewDirectory(config.Approvals{Slack: &cfg, People: []config.Person{
				{Name: "carol", SlackID: "UCAROL", Roles: []string{"secops"}, Tenants: tc.tenants}}})
			f.slack = NewSlack(cfg, f.st, WithSlackClock(func() time.Time { return chanNow }), WithSlackWait((&chanWaits{}).wait),
				WithSlackPeople(people))
			f.handler = f.slack.Handler(f.voter)
			body := chanPayload("UCAROL", "approve", "apr_vote", "")
			code, ans := chanPost(t, f.handler, chanSign(chanSigningSecret, chanNow.Unix(), body), body)
			if code != http.StatusOK || ans.Text != tc.want {
				t.Errorf("answer %d %q, want %q", code, ans.Text, tc.want)
			}
			if got := len(f.votes(t)); got != tc.votes {
				t.Errorf("%d votes recorded, want %d", got, tc.votes)
			}
		})
	}
}
