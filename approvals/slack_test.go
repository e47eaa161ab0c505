package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"gatekeeper/config"
)

const (
	chanBotToken      = "xoxb-test-bot-token-0000"
	chanSigningSecret = "8f742231b10e8888abcd99yyyzzz85a5"
)

// slackCall is one Web API call the stand-in received.
type slackCall struct {
	Method      string
	Auth        string
	ContentType string
	Raw         []byte
	Body        slackMessage
}

// slackAPI stands in for Slack's Web API on loopback: it records every call
// and answers as Slack does, or with what a test scripted.
type slackAPI struct {
	t      testing.TB
	srv    *httptest.Server
	mu     sync.Mutex
	calls  []slackCall
	script []func(w http.ResponseWriter) // answers in order; then ok:true
	posts  int
	follow []string // bodies posted to /response
}

func newSlackAPI(t testing.TB) *slackAPI {
	t.Helper()
	a := &slackAPI{t: t}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *slackAPI) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.URL.Path == "/response" {
		a.follow = append(a.follow, string(raw))
		return
	}
	c := slackCall{Method: strings.TrimPrefix(r.URL.Path, "/api/"), Auth: r.Header.Get("Authorization"),
		ContentType: r.Header.Get("Content-Type"), Raw: raw}
	if err := json.Unmarshal(raw, &c.Body); err != nil {
		a.t.Errorf("Web API call body is not a message: %v", err)
	}
	a.calls = append(a.calls, c)
	if len(a.script) > 0 {
		next := a.script[0]
		a.script = a.script[1:]
		next(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch c.Method {
	case "chat.postMessage":
		a.posts++
		ts := "1700000000.00010" + string(rune('0'+a.posts))
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "channel": "C0APPROVE", "ts": ts})
	case "chat.update":
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "channel": c.Body.Channel, "ts": c.Body.TS})
	default:
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "unknown_method"})
	}
}

func (a *slackAPI) answer(fns ...func(w http.ResponseWriter)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.script = append(a.script, fns...)
}

func (a *slackAPI) Calls() []slackCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]slackCall(nil), a.calls...)
}

func (a *slackAPI) FollowUps() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.follow...)
}

func (a *slackAPI) config() config.Slack {
	return config.Slack{
		BotToken: chanBotToken, SigningSecret: chanSigningSecret, Channel: "#approvals",
		APIURL: a.srv.URL + "/api",
		Users: []config.SlackUser{
			{SlackID: "UCAROL", Name: "carol", Roles: []string{"secops"}},
			{SlackID: "UDAVE", Name: "dave", Roles: []string{"sre"}},
			{SlackID: "UERIN", Name: "erin", Roles: []string{"finance"}},
		},
	}
}

// chanWaits records the delays a notifier asked to wait, without waiting.
type chanWaits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (w *chanWaits) wait(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.d = append(w.d, d)
	return ctx.Err()
}

var chanNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// chanRequest is a pending request as Service.Open stores it.
func chanRequest(t testing.TB, id string) *Request {
	t.Helper()
	call, err := Canonical("Bash", []byte(`{"command":"kubectl delete ns prod","timeout":30}`))
	if err != nil {
		t.Fatal(err)
	}
	return &Request{
		ID: id, Hold: "hold_1", Trajectory: "trj_abc", Root: "trj_abc", Thread: "th_1", Tenant: "team-a",
		CallID: "toolu_1", Call: call, Digest: call.Digest(), Gate: "destructive-shell",
		Why:      `tool.name == "Bash" && tool.input.command.matches("kubectl delete")`,
		Preview:  Preview(call),
		Observed: Observed{State: "CALLING_MODEL", Stage: "normal", BudgetUsed: 0.125},
		Roles:    []string{"secops", "sre"}, Quorum: 2, DistinctRoles: true, OnRefusal: "continue",
		CreatedAt: chanNow, ExpiresAt: chanNow.Add(15 * time.Minute), State: Pending,
	}
}

func newChanSlack(t testing.TB, api *slackAPI, st Store, w *chanWaits) *Slack {
	t.Helper()
	return NewSlack(api.config(), st, WithSlackClock(func() time.Time { return chanNow }), WithSlackWait(w.wait))
}

func TestSlackAnnouncePostsBlocksWithOnlyTheIDInButtons(t *testing.T) {
	api := newSlackAPI(t)
	st := newChanStore(t)
	r := st.put(t, chanRequest(t, "apr_one"))
	s := newChanSlack(t, api, st, &chanWaits{})

	if err := s.Announce(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	calls := api.Calls()
	if len(calls) != 1 || calls[0].Method != "chat.postMessage" {
		t.Fatalf("calls = %+v, want one chat.postMessage", calls)
	}
	c := calls[0]
	if c.Auth != "Bearer "+chanBotToken {
		t.Errorf("Authorization = %q", c.Auth)
	}
	if c.ContentType != "application/json; charset=utf-8" {
		t.Errorf("Content-Type = %q", c.ContentType)
	}
	if c.Body.Channel != "#approvals" || c.Body.Text == "" {
		t.Errorf("channel %q text %q", c.Body.Channel, c.Body.Text)
	}
	if strings.Contains(string(c.Raw), chanBotToken) || strings.Contains(string(c.Raw), chanSigningSecret) {
		t.Error("a secret is in the message")
	}

	var blocks []map[string]any
	if err := json.Unmarshal(rawBlocks(t, c.Raw), &blocks); err != nil {
		t.Fatal(err)
	}
	types := []string{}
	for _, b := range blocks {
		types = append(types, b["type"].(string))
	}
	if got := strings.Join(types, ","); got != "header,section,section,section,context,actions" {
		t.Fatalf("block types = %s", got)
	}
	buttons := blocks[5]["elements"].([]any)
	want := map[string]string{"approve": "primary", "deny": "danger"}
	for _, e := range buttons {
		b := e.(map[string]any)
		if b["value"] != "apr_one" {
			t.Errorf("button %v value = %v, want the request id only", b["action_id"], b["value"])
		}
		if want[b["action_id"].(string)] != b["style"] {
			t.Errorf("button %v style %v", b["action_id"], b["style"])
		}
		delete(want, b["action_id"].(string))
	}
	if len(want) != 0 {
		t.Errorf("missing buttons %v", want)
	}
	msg := string(c.Raw)
	for _, fact := range []string{"destructive-shell", "trj_abc", "team-a", "12.5%", "<!date^" +
		chanItoa(chanNow.Add(15*time.Minute).Unix()) + "^{date_short_pretty} {time}|2026-03-01T12:15:00Z>",
		"kubectl delete ns prod", "2 of secops, sre (distinct roles)", r.Digest} {
		if !strings.Contains(msg, chanJSONString(fact)) {
			t.Errorf("message lacks %q", fact)
		}
	}

	stored, err := st.Get(t.Context(), "apr_one")
	if err != nil {
		t.Fatal(err)
	}
	if stored.Channels[SlackChannelKey] != "C0APPROVE" || stored.Channels[SlackTSKey] != "1700000000.000101" {
		t.Errorf("stored channels = %v", stored.Channels)
	}
}

func TestSlackDecidedUpdatesInPlace(t *testing.T) {
	api := newSlackAPI(t)
	st := newChanStore(t)
	r := st.put(t, chanRequest(t, "apr_two"))
	s := newChanSlack(t, api, st, &chanWaits{})
	if err := s.Announce(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	decided, err := st.Update(t.Context(), r.ID, func(r *Request) error {
		_, err := r.Cast(Vote{Approver: "carol", Roles: []string{"secops"}, Reason: "not in prod", Via: ViaSlack}, chanNow)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Decided(t.Context(), decided); err != nil {
		t.Fatal(err)
	}
	calls := api.Calls()
	if len(calls) != 2 || calls[1].Method != "chat.update" {
		t.Fatalf("calls = %d, want postMessage then update", len(calls))
	}
	up := calls[1].Body
	if up.Channel != "C0APPROVE" || up.TS != "1700000000.000101" {
		t.Errorf("update channel %q ts %q, want the posted message's", up.Channel, up.TS)
	}
	last := up.Blocks[len(up.Blocks)-1]
	if last.Type != "context" {
		t.Fatalf("last block %q, want the outcome context in place of the buttons", last.Type)
	}
	for _, b := range up.Blocks {
		if b.Type == "actions" {
			t.Error("decided message still has buttons")
		}
	}
	if txt := contextText(t, calls[1].Raw); txt != "Denied by carol: not in prod" {
		t.Errorf("outcome = %q", txt)
	}
}

func TestSlackOutcomeLines(t *testing.T) {
	vote := func(name string, approve bool, reason string) Vote {
		return Vote{Approver: name, Approve: approve, Reason: reason}
	}
	tests := []struct {
		name  string
		state State
		votes []Vote
		why   string
		want  string
	}{
		{"approved", Approved, []Vote{vote("carol", true, ""), vote("dave", true, "")}, "approved", "Approved by carol, dave"},
		{"denied with reason", Denied, []Vote{vote("carol", true, ""), vote("dave", false, "wrong cluster")}, "", "Denied by dave: wrong cluster"},
		{"denied no reason", Denied, []Vote{vote("carol", false, "")}, "denied by carol", "Denied by carol: denied by carol"},
		{"expired", Expired, nil, "expired", "Expired with no decision"},
		{"expired short of quorum", Expired, []Vote{vote("carol", true, "")}, "expired", "Expired with no decision (approved by carol, short of the quorum)"},
		{"stale", Stale, nil, "budget halted", "Stale: budget halted"},
		{"withdrawn", Withdrawn, nil, "", "Withdrawn"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &Request{State: tc.state, Votes: tc.votes, Reason: tc.why}
			if got := outcomeLine(r); got != tc.want {
				t.Errorf("outcomeLine = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSlackOKFalseIsAnError(t *testing.T) {
	api := newSlackAPI(t)
	st := newChanStore(t)
	r := st.put(t, chanRequest(t, "apr_three"))
	s := newChanSlack(t, api, st, &chanWaits{})
	api.answer(func(w http.ResponseWriter) {
		_, _ = io.WriteString(w, `{"ok":false,"error":"channel_not_found"}`)
	})
	err := s.Announce(t.Context(), r)
	var se *SlackError
	if !errors.As(err, &se) || se.Code != "channel_not_found" || se.Method != "chat.postMessage" {
		t.Fatalf("err = %v, want SlackError channel_not_found", err)
	}
	if strings.Contains(err.Error(), chanBotToken) {
		t.Error("the error carries the bot token")
	}
	if n := len(api.Calls()); n != 1 {
		t.Errorf("calls = %d, want 1 (ok:false is not retried)", n)
	}
	stored, _ := st.Get(t.Context(), r.ID)
	if len(stored.Channels) != 0 {
		t.Errorf("channels stored after a failed post: %v", stored.Channels)
	}
}

func TestSlackRetries(t *testing.T) {
	tooMany := func(after string) func(w http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", after)
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}
	status := func(code int) func(w http.ResponseWriter) {
		return func(w http.ResponseWriter) { w.WriteHeader(code) }
	}
	tests := []struct {
		name      string
		script    []func(http.ResponseWriter)
		wantCalls int
		wantWaits []time.Duration
		wantErr   bool
	}{
		{"429 waits its Retry-After", []func(http.ResponseWriter){tooMany("3")}, 2, []time.Duration{3 * time.Second}, false},
		{"5xx backs off", []func(http.ResponseWriter){status(502), status(503)}, 3,
			[]time.Duration{500 * time.Millisecond, time.Second}, false},
		{"5xx bounded", []func(http.ResponseWriter){status(500), status(500), status(500), status(500), status(500)}, 4,
			[]time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}, true},
		{"4xx not retried", []func(http.ResponseWriter){status(404)}, 1, nil, true},
		{"Retry-After too long gives up", []func(http.ResponseWriter){tooMany("120")}, 1, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			api := newSlackAPI(t)
			st := newChanStore(t)
			r := chanRequest(t, "apr_retry")
			r.State = Expired
			r.Channels = map[string]string{SlackChannelKey: "C0APPROVE", SlackTSKey: "1700000000.000100"}
			st.put(t, r)
			w := &chanWaits{}
			s := newChanSlack(t, api, st, w)
			api.answer(tc.script...)
			err := s.Decided(t.Context(), r)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			calls := api.Calls()
			if len(calls) != tc.wantCalls {
				t.Fatalf("calls = %d, want %d", len(calls), tc.wantCalls)
			}
			for _, c := range calls {
				if c.Method != "chat.update" || c.Body.TS != "1700000000.000100" {
					t.Errorf("call %s ts %q, want chat.update of the same ts", c.Method, c.Body.TS)
				}
			}
			if !chanEqualDurations(w.d, tc.wantWaits) {
				t.Errorf("waits = %v, want %v", w.d, tc.wantWaits)
			}
		})
	}
}

func TestSlackDecidedWithoutMessagePostsOne(t *testing.T) {
	api := newSlackAPI(t)
	st := newChanStore(t)
	r := chanRequest(t, "apr_unposted")
	r.Expire(r.ExpiresAt)
	st.put(t, r)
	s := newChanSlack(t, api, st, &chanWaits{})
	if err := s.Decided(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	calls := api.Calls()
	if len(calls) != 1 || calls[0].Method != "chat.postMessage" {
		t.Fatalf("calls = %+v, want one postMessage", calls)
	}
	if txt := contextText(t, calls[0].Raw); txt != "Expired with no decision" {
		t.Errorf("outcome = %q", txt)
	}
}

func TestSlackMessageEscapesAndFits(t *testing.T) {
	api := newSlackAPI(t)
	s := newChanSlack(t, api, newChanStore(t), &chanWaits{})
	long := strings.Repeat("<!channel> & ```x``` é ", 400)
	arg, _ := json.Marshal(map[string]string{"command": long})
	call, err := Canonical("Bash", arg)
	if err != nil {
		t.Fatal(err)
	}
	r := chanRequest(t, "apr_esc")
	r.Call = call
	r.Why = "tool.input.command.matches(\"<@U123>\")"
	msg := s.message(r, "")
	callText := msg.Blocks[1].Text.Text
	if n := utf8.RuneCountInString(callText); n > slackSectionMax {
		t.Errorf("call section is %d characters, over Slack's %d", n, slackSectionMax)
	}
	if !strings.Contains(callText, " characters elided]… ") || !strings.HasSuffix(callText, `é "}`+"```") {
		t.Errorf("a long call shows %q…%q, want its head, the stated elision and its tail", callText[:40], callText[len(callText)-40:])
	}
	body, _ := json.Marshal(msg)
	for _, bad := range []string{"<!channel>", "<@U123>"} {
		if strings.Contains(string(body), chanJSONString(bad)) {
			t.Errorf("message carries %q unescaped", bad)
		}
	}
	inner := strings.TrimSuffix(strings.TrimPrefix(callText[strings.Index(callText, "```"):], "```"), "```")
	if strings.Contains(inner, "```") {
		t.Error("the tool input closes the code block early")
	}
}

func chanEqualDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// chanJSONString is s as it appears inside a JSON string.
func chanJSONString(s string) string {
	b, _ := json.Marshal(s)
	return strings.Trim(string(b), `"`)
}

func chanItoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func rawBlocks(t *testing.T, raw []byte) []byte {
	t.Helper()
	var m struct {
		Blocks json.RawMessage `json:"blocks"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m.Blocks
}

// contextText is the text of a message's last block, the outcome line.
func contextText(t *testing.T, raw []byte) string {
	t.Helper()
	var blocks []struct {
		Type     string      `json:"type"`
		Elements []slackText `json:"elements"`
	}
	if err := json.Unmarshal(rawBlocks(t, raw), &blocks); err != nil {
		t.Fatal(err)
	}
	last := blocks[len(blocks)-1]
	if last.Type != "context" || len(last.Elements) != 1 {
		t.Fatalf("last block %+v, want one context element", last)
	}
	return last.Elements[0].Text
}

// A decision that lands while the message is being posted found no ts to
// update; Announce brings the message up to date itself.
func TestSlackAnnounceCatchesUpWithDecision(t *testing.T) {
	api := newSlackAPI(t)
	st := newChanStore(t)
	r := st.put(t, chanRequest(t, "apr_race"))
	s := newChanSlack(t, api, st, &chanWaits{})
	api.answer(func(w http.ResponseWriter) {
		if _, err := st.Update(context.Background(), r.ID, func(r *Request) error {
			_, err := r.Cast(Vote{Approver: "dave", Roles: []string{"sre"}, Reason: "no"}, chanNow)
			return err
		}); err != nil {
			t.Error(err)
		}
		_, _ = io.WriteString(w, `{"ok":true,"channel":"C0APPROVE","ts":"1700000000.000777"}`)
	})
	if err := s.Announce(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	calls := api.Calls()
	if len(calls) != 2 || calls[1].Method != "chat.update" || calls[1].Body.TS != "1700000000.000777" {
		t.Fatalf("calls = %+v, want the post then an update of it", calls)
	}
	if txt := contextText(t, calls[1].Raw); txt != "Denied by dave: no" {
		t.Errorf("outcome = %q", txt)
	}
}
