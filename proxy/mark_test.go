package proxy_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"

	"gatekeeper/trajectory"
)

// TestOutcomeHeaders: a harness names the task class on its first call and
// the outcome on its last, through the official SDKs; both land on the run's
// record with an outcome event, and neither header reaches the provider.
func TestOutcomeHeaders(t *testing.T) {
	e := newEnv(t, envOpts{})
	c := anthropic.NewClient(aoption.WithBaseURL(e.gk+"/t/run-m/anthropic"), aoption.WithAPIKey(vkA), aoption.WithMaxRetries(0))
	params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 256,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("fix the bug"))}}
	if _, err := c.Messages.New(ctxT(t), params, aoption.WithHeader("X-Gatekeeper-Task-Class", "bugfix")); err != nil {
		t.Fatal(err)
	}
	if rec := e.record(t, "run-m"); rec.TaskClass != "bugfix" || rec.Outcome != "" {
		t.Fatalf("after the first call: class %q outcome %q", rec.TaskClass, rec.Outcome)
	}
	if _, err := c.Messages.New(ctxT(t), params, aoption.WithHeader("X-Gatekeeper-Outcome", "accepted")); err != nil {
		t.Fatal(err)
	}
	rec := e.record(t, "run-m")
	if rec.TaskClass != "bugfix" || rec.Outcome != trajectory.OutcomeAccepted || rec.Turns != 2 {
		t.Fatalf("after the last call: class %q outcome %q turns %d", rec.TaskClass, rec.Outcome, rec.Turns)
	}
	var data []string
	for _, ev := range e.events(t, "run-m") {
		if ev.Type == trajectory.EventOutcome {
			data = append(data, string(ev.Data))
		}
	}
	want := []string{
		`{"by":"harness","source":"header","from":{},"to":{"task_class":"bugfix"}}`,
		`{"by":"harness","source":"header","from":{"task_class":"bugfix"},"to":{"outcome":"accepted","task_class":"bugfix"}}`,
	}
	if strings.Join(data, "\n") != strings.Join(want, "\n") {
		t.Errorf("outcome events:\n%s\nwant\n%s", strings.Join(data, "\n"), strings.Join(want, "\n"))
	}
	reqs := e.mock.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the provider saw %d requests, want 2", len(reqs))
	}
	for _, r := range reqs {
		for k := range r.Header {
			if strings.HasPrefix(strings.ToLower(k), "x-gatekeeper-") {
				t.Errorf("the provider got %s", k)
			}
		}
	}
}

// TestOutcomeHeadersRefused: a bad value is answered 400 in the
// provider's own format, before admission: no call reaches the provider
// and the record is not marked.
func TestOutcomeHeadersRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	tests := []struct {
		name, header, value string
		msg                 string
	}{
		{"unknown outcome", "X-Gatekeeper-Outcome", "done", `"accepted" or "rejected"`},
		{"class with a space", "X-Gatekeeper-Task-Class", "bug fix", "task class may hold only"},
		{"class too long", "X-Gatekeeper-Task-Class", strings.Repeat("c", 65), "1-64"},
	}
	for _, tc := range tests {
		t.Run(tc.name+" anthropic", func(t *testing.T) {
			c := anthropic.NewClient(aoption.WithBaseURL(e.gk+"/t/run-bad/anthropic"), aoption.WithAPIKey(vkA), aoption.WithMaxRetries(0))
			_, err := c.Messages.New(ctxT(t), anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 256,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}},
				aoption.WithHeader(tc.header, tc.value))
			var ae *anthropic.Error
			if !errors.As(err, &ae) {
				t.Fatalf("error %v, want the provider's error", err)
			}
			var body struct {
				Type  string `json:"type"`
				Error struct{ Type, Message string }
			}
			if err := json.Unmarshal([]byte(ae.RawJSON()), &body); err != nil {
				t.Fatal(err)
			}
			if ae.StatusCode != http.StatusBadRequest || body.Type != "error" || body.Error.Type != "invalid_request_error" ||
				!strings.Contains(body.Error.Message, tc.msg) || !strings.HasPrefix(body.Error.Message, tc.header) {
				t.Fatalf("%d %s, want a 400 invalid_request_error naming %s and %q", ae.StatusCode, ae.RawJSON(), tc.header, tc.msg)
			}
		})
		t.Run(tc.name+" openai", func(t *testing.T) {
			c := openai.NewClient(ooption.WithBaseURL(e.gk+"/t/run-bad/openai/v1"), ooption.WithAPIKey(vkA), ooption.WithMaxRetries(0))
			_, err := c.Chat.Completions.New(ctxT(t), chatParams(), ooption.WithHeader(tc.header, tc.value))
			var oe *openai.Error
			if !errors.As(err, &oe) || oe.StatusCode != http.StatusBadRequest || oe.Type != "invalid_request_error" || !strings.Contains(oe.Message, tc.msg) {
				t.Fatalf("error %v, want a 400 invalid_request_error with %q", err, tc.msg)
			}
		})
	}
	t.Run("sent twice", func(t *testing.T) {
		resp := e.do(t, http.MethodPost, "/t/run-bad/anthropic/v1/messages",
			`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`,
			"x-api-key", vkA, "anthropic-version", "2023-06-01", "content-type", "application/json")
		readAll(t, resp)
		req, _ := http.NewRequestWithContext(ctxT(t), http.MethodPost, e.gk+"/t/run-bad/anthropic/v1/messages",
			strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("x-api-key", vkA)
		req.Header.Set("content-type", "application/json")
		req.Header.Add("X-Gatekeeper-Outcome", "accepted")
		req.Header.Add("X-Gatekeeper-Outcome", "rejected")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := string(readAll(t, resp))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "more than once") {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	})
	if n := len(e.mock.Requests()); n != 1 {
		t.Errorf("the provider saw %d requests, want only the one good call", n)
	}
	if rec := e.record(t, "run-bad"); rec.Outcome != "" || rec.TaskClass != "" {
		t.Errorf("a refused request marked the run: %q %q", rec.Outcome, rec.TaskClass)
	}
}
