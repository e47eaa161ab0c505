package approvals

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"gatekeeper/config"
)

var chanWebhookSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("gatekeeper-webhook-test-key-0001"))

// chanWebhookHeaders signs body as a sender would, independently of
// signWebhook.
func chanWebhookHeaders(secret, id string, ts int64, body []byte) http.Header {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		panic(err)
	}
	sig, err := wh.Sign(id, time.Unix(ts, 0), body)
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set(HeaderWebhookID, id)
	h.Set(HeaderWebhookTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderWebhookSignature, sig)
	return h
}

// delivery is one request the receiver got.
type delivery struct {
	Header http.Header
	Body   []byte
	Ours   error // VerifyWebhook's verdict
	Ref    error // the Standard Webhooks reference library's verdict
}

// receiver is a loopback webhook endpoint that verifies every delivery
// both ways and answers with its script, then 204.
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []delivery
	script []int
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	t.Helper()
	ref, err := standardwebhooks.NewWebhook(chanWebhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	rc := &receiver{script: statuses}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		d := delivery{Header: r.Header.Clone(), Body: body,
			Ours: VerifyWebhook(chanWebhookSecret, r.Header, body, time.Now()),
			Ref:  ref.Verify(body, r.Header)}
		rc.mu.Lock()
		rc.got = append(rc.got, d)
		status := http.StatusNoContent
		if len(rc.script) > 0 {
			status, rc.script = rc.script[0], rc.script[1:]
		}
		rc.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) deliveries() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]delivery(nil), rc.got...)
}

func newChanWebhook(t *testing.T, url string, w *chanWaits) *Webhook {
	t.Helper()
	// The reference library checks timestamps against the real clock.
	wh, err := NewWebhook(config.Webhook{URL: url, Secret: chanWebhookSecret}, WithWebhookWait(w.wait))
	if err != nil {
		t.Fatal(err)
	}
	return wh
}

func TestWebhookDeliveriesVerifyBothWays(t *testing.T) {
	rc := newReceiver(t)
	wh := newChanWebhook(t, rc.srv.URL, &chanWaits{})
	r := chanRequest(t, "apr_hook")
	if err := wh.Announce(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	r.Expire(r.ExpiresAt)
	if err := wh.Decided(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	got := rc.deliveries()
	if len(got) != 2 {
		t.Fatalf("deliveries = %d, want 2", len(got))
	}
	for i, want := range []struct{ typ, id string }{
		{EventRequested, "msg_apr_hook_requested"}, {EventDecided, "msg_apr_hook_decided"},
	} {
		d := got[i]
		if d.Ours != nil || d.Ref != nil {
			t.Errorf("delivery %d: VerifyWebhook %v, reference %v", i, d.Ours, d.Ref)
		}
		if d.Header.Get(HeaderWebhookID) != want.id {
			t.Errorf("delivery %d: webhook-id %q, want %q", i, d.Header.Get(HeaderWebhookID), want.id)
		}
		if ct := d.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		var ev struct {
			Type      string  `json:"type"`
			Timestamp string  `json:"timestamp"`
			Data      Request `json:"data"`
		}
		if err := json.Unmarshal(d.Body, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type != want.typ || ev.Data.ID != "apr_hook" || ev.Data.Digest != r.Digest {
			t.Errorf("delivery %d: type %q data %s/%s", i, ev.Type, ev.Data.ID, ev.Data.Digest)
		}
		if _, err := time.Parse(time.RFC3339, ev.Timestamp); err != nil {
			t.Errorf("timestamp %q: %v", ev.Timestamp, err)
		}
		if strings.Contains(string(d.Body), chanWebhookSecret) {
			t.Error("the secret is in the body")
		}
	}
	var ev struct{ Data Request }
	_ = json.Unmarshal(got[1].Body, &ev)
	if ev.Data.State != Expired {
		t.Errorf("decided delivery state %q", ev.Data.State)
	}
}

func TestWebhookTamperedRejected(t *testing.T) {
	body := []byte(`{"type":"approval.decided","timestamp":"2026-03-01T12:00:00Z","data":{"id":"apr_1","state":"denied"}}`)
	now := time.Now()
	good := chanWebhookHeaders(chanWebhookSecret, "msg_apr_1_decided", now.Unix(), body)
	ref, _ := standardwebhooks.NewWebhook(chanWebhookSecret)
	other := "whsec_" + base64.StdEncoding.EncodeToString([]byte("another key"))
	tests := []struct {
		name   string
		header func() http.Header
		body   []byte
		want   error
	}{
		{"good", func() http.Header { return good.Clone() }, body, nil},
		{"good among others", func() http.Header {
			h := good.Clone()
			h.Set(HeaderWebhookSignature, "v1,AAAA v1a,BBBB "+good.Get(HeaderWebhookSignature))
			return h
		}, body, nil},
		{"tampered body", func() http.Header { return good.Clone() },
			[]byte(strings.Replace(string(body), "denied", "approved", 1)), ErrBadSignature},
		{"tampered timestamp", func() http.Header {
			h := good.Clone()
			h.Set(HeaderWebhookTimestamp, strconv.FormatInt(now.Unix()-1, 10))
			return h
		}, body, ErrBadSignature},
		{"tampered id", func() http.Header {
			h := good.Clone()
			h.Set(HeaderWebhookID, "msg_apr_2_decided")
			return h
		}, body, ErrBadSignature},
		{"other secret", func() http.Header {
			return chanWebhookHeaders(other, "msg_apr_1_decided", now.Unix(), body)
		}, body, ErrBadSignature},
		{"old", func() http.Header {
			return chanWebhookHeaders(chanWebhookSecret, "msg_apr_1_decided", now.Add(-6*time.Minute).Unix(), body)
		}, body, ErrBadTimestamp},
		{"future", func() http.Header {
			return chanWebhookHeaders(chanWebhookSecret, "msg_apr_1_decided", now.Add(6*time.Minute).Unix(), body)
		}, body, ErrBadTimestamp},
		{"missing id", func() http.Header {
			h := good.Clone()
			h.Del(HeaderWebhookID)
			return h
		}, body, ErrBadSignature},
		{"wrong version", func() http.Header {
			h := good.Clone()
			h.Set(HeaderWebhookSignature, "v2,"+strings.TrimPrefix(good.Get(HeaderWebhookSignature), "v1,"))
			return h
		}, body, ErrBadSignature},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.header()
			err := VerifyWebhook(chanWebhookSecret, h, tc.body, now)
			if !errors.Is(err, tc.want) {
				t.Errorf("VerifyWebhook = %v, want %v", err, tc.want)
			}
			// The reference library agrees.
			if refErr := ref.Verify(tc.body, h); (refErr == nil) != (tc.want == nil) {
				t.Errorf("reference library: %v, ours: %v", refErr, err)
			}
		})
	}
}

func TestWebhookRetriesKeepTheID(t *testing.T) {
	tests := []struct {
		name      string
		statuses  []int
		wantTries int
		wantWaits []time.Duration
		wantErr   bool
	}{
		{"5xx then ok", []int{503, 500}, 3, []time.Duration{500 * time.Millisecond, time.Second}, false},
		{"429", []int{429}, 2, []time.Duration{time.Second}, false},
		{"bounded", []int{500, 500, 500, 500, 500}, 4, []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}, true},
		{"4xx not retried", []int{400}, 1, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReceiver(t, tc.statuses...)
			w := &chanWaits{}
			wh := newChanWebhook(t, rc.srv.URL, w)
			err := wh.Announce(t.Context(), chanRequest(t, "apr_retry"))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			var we *WebhookError
			if tc.wantErr && !errors.As(err, &we) {
				t.Errorf("err %v is not a WebhookError", err)
			}
			got := rc.deliveries()
			if len(got) != tc.wantTries {
				t.Fatalf("tries = %d, want %d", len(got), tc.wantTries)
			}
			for _, d := range got {
				if d.Header.Get(HeaderWebhookID) != "msg_apr_retry_requested" || d.Ours != nil || d.Ref != nil {
					t.Errorf("try: id %q ours %v ref %v", d.Header.Get(HeaderWebhookID), d.Ours, d.Ref)
				}
				if string(d.Body) != string(got[0].Body) {
					t.Error("a retry changed the body")
				}
			}
			if !chanEqualDurations(w.d, tc.wantWaits) {
				t.Errorf("waits = %v, want %v", w.d, tc.wantWaits)
			}
		})
	}
}

func TestWebhookNetworkErrorRetried(t *testing.T) {
	rc := newReceiver(t)
	url := rc.srv.URL
	rc.srv.Close() // nothing listens: every try fails to connect
	w := &chanWaits{}
	wh := newChanWebhook(t, url, w)
	if err := wh.Decided(t.Context(), chanRequest(t, "apr_down")); err == nil {
		t.Fatal("delivery to a closed port succeeded")
	}
	if len(w.d) != webhookAttempts-1 {
		t.Errorf("waits = %v, want %d", w.d, webhookAttempts-1)
	}
}

func TestNewWebhookRefusesBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  config.Webhook
	}{
		{"no prefix", config.Webhook{URL: "https://chat.example/h", Secret: "c2VjcmV0LXZhbHVl"}},
		{"not base64", config.Webhook{URL: "https://chat.example/h", Secret: "whsec_not*base64!"}},
		{"empty key", config.Webhook{URL: "https://chat.example/h", Secret: "whsec_"}},
		{"relative url", config.Webhook{URL: "/hooks", Secret: chanWebhookSecret}},
		{"other scheme", config.Webhook{URL: "ftp://chat.example/h", Secret: chanWebhookSecret}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewWebhook(tc.cfg)
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), strings.TrimPrefix(tc.cfg.Secret, "whsec_")) && tc.cfg.Secret != "whsec_" {
				t.Errorf("error %q carries the secret", err)
			}
		})
	}
}

// The webhook payload carries the whole call exactly and its display
// forms: head and tail with the elision stated, the matched part, and
// invisible characters escaped.
func TestWebhookPayloadShowsTheWholeCall(t *testing.T) {
	rc := newReceiver(t)
	wh := newChanWebhook(t, rc.srv.URL, &chanWaits{})
	g := compile(t, gate("destructive-shell", destructive))
	gt, _ := g.Lookup("destructive-shell")
	cmd := "echo harmless-" + strings.Repeat("a", 4970) + "; rm -rf /\u2066"
	args, _ := json.Marshal(map[string]string{"command": cmd})
	call, err := Canonical("Bash", args)
	if err != nil {
		t.Fatal(err)
	}
	r := gt.Request("apr_whole", call, destructive, chanNow)
	if err := wh.Announce(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	got := rc.deliveries()
	if len(got) != 1 {
		t.Fatalf("deliveries = %d", len(got))
	}
	var ev struct {
		Data struct {
			Call struct {
				Input struct{ Command string } `json:"input"`
			} `json:"call"`
			Preview   string  `json:"preview"`
			Matched   []Match `json:"matched"`
			Invisible int     `json:"invisible_chars"`
		} `json:"data"`
	}
	if err := json.Unmarshal(got[0].Body, &ev); err != nil {
		t.Fatal(err)
	}
	d := ev.Data
	if d.Call.Input.Command != cmd {
		t.Error("the payload's call is not the whole call")
	}
	if !strings.Contains(d.Preview, " characters elided]… ") || !strings.HasSuffix(d.Preview, `; rm -rf /\u2066"}`) {
		t.Errorf("preview = %q", d.Preview)
	}
	if len(d.Matched) != 1 || d.Matched[0].Text != "rm -rf" || d.Matched[0].After != ` /\u2066` || d.Invisible != 1 {
		t.Errorf("matched %+v, invisible %d", d.Matched, d.Invisible)
	}
}
