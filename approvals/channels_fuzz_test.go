package approvals

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// FuzzSlackInteraction feeds arbitrary form bodies through the parser and,
// signed, through the whole handler: nothing panics, nothing but a
// well-formed press of a mapped user reaches the voter, and every answer
// is one of the statuses the endpoint documents.
func FuzzSlackInteraction(f *testing.F) {
	f.Add(chanPayload("UCAROL", "approve", "apr_vote", ""))
	f.Add(chanPayload("UMALLORY", "deny", "apr_vote", "https://hooks.slack.com/actions/x"))
	f.Add(chanPayload("UCAROL", "escalate", "", ""))
	f.Add([]byte("payload=%7B%22type%22%3A%22view_submission%22%7D"))
	f.Add([]byte("payload=%7B%22type%22%3A%22block_actions%22%2C%22actions%22%3A%5B%5D%7D"))
	f.Add([]byte("payload=null"))
	f.Add([]byte("payload=%zz"))
	f.Add([]byte("a=1&payload="))
	f.Add([]byte{})
	api := newSlackAPI(f)
	st := newChanStore(f)
	st.put(f, chanRequest(f, "apr_vote"))
	s := newChanSlack(f, api, st, &chanWaits{})
	f.Fuzz(func(t *testing.T, body []byte) {
		in, err := parseInteraction(body)
		if err == nil && in == nil {
			t.Fatal("nil interaction without an error")
		}
		v := &chanVoter{st: st, now: chanNow}
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/hooks/slack/interactions", bytes.NewReader(body))
		req.Header = chanSign(chanSigningSecret, chanNow.Unix(), body)
		rec := httptest.NewRecorder()
		s.Handler(v).ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d", rec.Code)
		}
		if v.calls > 0 {
			if err != nil || in.Type != "block_actions" || len(in.Actions) == 0 {
				t.Fatalf("voter reached by %q", body)
			}
			if _, ok := s.people.Slack(in.User.ID); !ok {
				t.Fatalf("voter reached for unmapped user %q", in.User.ID)
			}
		}
	})
}

// FuzzVerifySlack checks that only the exact signature over the exact
// timestamp and body passes.
func FuzzVerifySlack(f *testing.F) {
	body := chanPayload("UCAROL", "approve", "apr_vote", "")
	good := chanSign(chanSigningSecret, chanNow.Unix(), body)
	f.Add(good.Get("X-Slack-Request-Timestamp"), good.Get("X-Slack-Signature"), body)
	f.Add(good.Get("X-Slack-Request-Timestamp"), good.Get("X-Slack-Signature"), body[1:])
	f.Add("", "", []byte{})
	f.Add("-1", "v0=", []byte("x"))
	f.Add("99999999999999999999", "v0=00", []byte("x"))
	f.Add(strconv.FormatInt(chanNow.Unix(), 10), "v1="+good.Get("X-Slack-Signature")[3:], body)
	f.Fuzz(func(t *testing.T, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set("X-Slack-Request-Timestamp", ts)
		h.Set("X-Slack-Signature", sig)
		err := VerifySlack(chanSigningSecret, h, body, chanNow)
		if err != nil {
			return
		}
		if n, perr := strconv.ParseInt(ts, 10, 64); perr != nil || n < chanNow.Unix()-300 || n > chanNow.Unix()+300 {
			t.Fatalf("timestamp %q accepted", ts)
		}
		want := chanSign(chanSigningSecret, mustInt(t, ts), body)
		if h.Get("X-Slack-Request-Timestamp") != want.Get("X-Slack-Request-Timestamp") ||
			sig != want.Get("X-Slack-Signature") {
			t.Fatalf("signature %q accepted for ts %q", sig, ts)
		}
	})
}

// FuzzVerifyWebhook checks that only a v1 signature over the exact id,
// timestamp and body passes, with any other signatures beside it.
func FuzzVerifyWebhook(f *testing.F) {
	body := []byte(`{"type":"approval.requested","timestamp":"2026-03-01T12:00:00Z","data":{"id":"apr_1"}}`)
	good := chanWebhookHeaders(chanWebhookSecret, "msg_apr_1_requested", chanNow.Unix(), body)
	f.Add(good.Get(HeaderWebhookID), good.Get(HeaderWebhookTimestamp), good.Get(HeaderWebhookSignature), body)
	f.Add(good.Get(HeaderWebhookID), good.Get(HeaderWebhookTimestamp), "v1,bogus "+good.Get(HeaderWebhookSignature), body)
	f.Add(good.Get(HeaderWebhookID), good.Get(HeaderWebhookTimestamp), "v1a,"+good.Get(HeaderWebhookSignature)[3:], body)
	f.Add("", "", "", []byte{})
	f.Add("msg", "0", "v1,", []byte("x"))
	f.Fuzz(func(t *testing.T, id, ts, sigs string, body []byte) {
		h := http.Header{}
		h.Set(HeaderWebhookID, id)
		h.Set(HeaderWebhookTimestamp, ts)
		h.Set(HeaderWebhookSignature, sigs)
		if err := VerifyWebhook(chanWebhookSecret, h, body, chanNow); err != nil {
			return
		}
		n := mustInt(t, ts)
		if n < chanNow.Unix()-300 || n > chanNow.Unix()+300 {
			t.Fatalf("timestamp %q accepted", ts)
		}
		want := chanWebhookHeaders(chanWebhookSecret, id, n, body).Get(HeaderWebhookSignature)
		if !containsField(sigs, want) {
			t.Fatalf("signatures %q accepted, none is %q", sigs, want)
		}
	})
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("accepted timestamp %q is not an integer", s)
	}
	return n
}

// containsField reports whether want is one of the whitespace-separated
// fields of s.
func containsField(s, want string) bool {
	for _, f := range bytes.Fields([]byte(s)) {
		if string(f) == want {
			return true
		}
	}
	return false
}
