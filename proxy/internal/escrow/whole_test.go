package escrow

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/streaming"
)

// opener is a turn's side of a whole reply for the tests: the gated calls
// it reports, and an Open that counts and may fail.
type opener struct {
	gated   bool
	open    func() (*approvals.Hold, error)
	opened  int
	openErr error
}

func (o *opener) Gated(res *streaming.Result) []Gated {
	if !o.gated {
		return nil
	}
	var out []Gated
	for _, tc := range res.ClientToolCalls() {
		out = append(out, Gated{Call: tc})
	}
	return out
}

func (o *opener) Open(context.Context, *streaming.Result, Reply, []Gated) (*approvals.Hold, error) {
	o.opened++
	if o.open != nil {
		return o.open()
	}
	return nil, o.openErr
}

// call is a continuation's model call for the tests: what Send answers,
// and what became of the call's turn.
type call struct {
	opener
	status  int
	body    string
	sendErr error
	ended   string // failed, refused (settled with no reply) or settled
	err     error
}

func (c *call) Send(context.Context) (*http.Response, error) {
	if c.sendErr != nil {
		return nil, c.sendErr
	}
	return &http.Response{StatusCode: c.status, Body: io.NopCloser(strings.NewReader(c.body))}, nil
}

func (c *call) Failed(err error) { c.ended, c.err = "failed", err }

func (c *call) Settle(res *streaming.Result, status int, body []byte) {
	c.ended = "settled"
	if res == nil {
		c.ended = "refused"
	}
}

// TestContinue drives the continuation's call to each of its ends, and
// checks what became of its turn.
func TestContinue(t *testing.T) {
	next := &approvals.Hold{ID: "hold_next"}
	tests := []struct {
		name  string
		call  call
		reply bool   // the continuation's reply is returned
		next  bool   // the next hold is returned
		err   string // in the error, when neither is returned
		ended string
	}{
		{name: "clean", call: call{status: 200, body: heldJSON}, reply: true, ended: "settled"},
		{name: "send fails", call: call{sendErr: errors.New("no key")}, err: "no key", ended: "failed"},
		{name: "provider refuses", call: call{status: 529, body: `{"type":"error"}`}, err: "status 529", ended: "refused"},
		{name: "too large", call: call{status: 200, body: heldJSON + strings.Repeat(" ", 4096)}, err: ErrTooLarge.Error(), ended: "failed"},
		{name: "undecodable", call: call{status: 200, body: `{"content":`}, err: "", ended: "failed"},
		{name: "gated, held again", call: call{status: 200, body: heldJSON, opener: opener{gated: true,
			open: func() (*approvals.Hold, error) { return next, nil }}}, next: true},
		{name: "gated, not held", call: call{status: 200, body: heldJSON, opener: opener{gated: true, openErr: errors.New("store down")}},
			err: "holding the continuation's gated call: store down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &Keeper{dialect: dialect, maxHeld: 4096}
			c := tt.call
			raw, h, err := e.Continue(context.Background(), &c, streaming.APIAnthropic, FormJSON)
			if ok := tt.reply || tt.next; ok != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.err) {
				t.Errorf("error %v, want %q", err, tt.err)
			}
			if (raw != nil) != tt.reply || (h != nil) != tt.next {
				t.Errorf("reply %q, next hold %v", raw, h)
			}
			if c.ended != tt.ended {
				t.Errorf("the call's turn %q, want %q", c.ended, tt.ended)
			}
			if tt.ended == "failed" && !errors.Is(err, c.err) {
				t.Errorf("failed with %v, returned %v", c.err, err)
			}
		})
	}
}

// TestHoldJSON: a non-streamed reply goes out as it came unless a call in
// it is gated; then it is held and decided, refused when too large to
// hold, or answered 503 when the hold cannot be opened.
func TestHoldJSON(t *testing.T) {
	r := newRig(t, config.OnRefusalEndTurn)
	client := func() *Client { return &Client{API: streaming.APIAnthropic, Form: FormJSON, Log: r.e.log} }
	ctx := context.Background()

	for _, body := range []string{`{"content":`, heldJSON} {
		out, held, err := r.e.HoldJSON(ctx, &opener{}, client(), []byte(body))
		if err != nil || held || string(out) != body {
			t.Errorf("ungated %.20q: %q held %v, %v", body, out, held, err)
		}
	}

	o := &opener{gated: true, openErr: errors.New("store down")}
	_, held, err := r.e.HoldJSON(ctx, o, client(), []byte(heldJSON))
	var ans *Answer
	if !errors.As(err, &ans) || ans.Status != http.StatusServiceUnavailable || held || o.opened != 1 {
		t.Errorf("hold not opened: held %v, %v", held, err)
	}

	o = &opener{gated: true, open: func() (*approvals.Hold, error) {
		h := r.open(t)
		r.vote(t, h, true)
		return h, nil
	}}
	out, held, err := r.e.HoldJSON(ctx, o, client(), []byte(heldJSON))
	if err != nil || !held || !strings.Contains(string(out), `"name":"Bash"`) {
		t.Errorf("approved: %s held %v, %v", out, held, err)
	}

	r.e.maxHeld = 16
	o = &opener{gated: true}
	out, held, err = r.e.HoldJSON(ctx, o, client(), []byte(heldJSON))
	if err != nil || held || o.opened != 0 || strings.Contains(string(out), `"name":"Bash"`) || !strings.Contains(string(out), "too large to hold") {
		t.Errorf("too large: %s held %v opened %d, %v", out, held, o.opened, err)
	}
}

// TestWriteRetry: a retry re-attached to a decided hold gets the reply in
// its own form; a second retry of the same turn gets 409 or an error
// event.
func TestWriteRetry(t *testing.T) {
	r := newRig(t, config.OnRefusalEndTurn)
	h := r.open(t)
	r.vote(t, h, true)
	ctx := context.Background()

	w := httptest.NewRecorder()
	c := &Client{API: streaming.APIAnthropic, Form: FormJSON, Log: r.e.log}
	if err := r.e.WriteRetryJSON(ctx, w, &Wait{Hold: h, Client: c}); err != nil || w.Code != 200 ||
		w.Header().Get("Content-Type") != "application/json" || !strings.Contains(w.Body.String(), `"name":"Bash"`) {
		t.Errorf("JSON retry: %d %s, %v", w.Code, w.Body, err)
	}
	w = httptest.NewRecorder()
	var ans *Answer
	if err := r.e.WriteRetryJSON(ctx, w, &Wait{Hold: h, Client: c}); !errors.As(err, &ans) || ans.Status != http.StatusConflict || w.Body.Len() != 0 {
		t.Errorf("second JSON retry: %v, wrote %q", err, w.Body)
	}

	w = httptest.NewRecorder()
	c = &Client{API: streaming.APIAnthropic, Form: FormStream, Log: r.e.log}
	if err := r.e.WriteRetryStream(ctx, w, &Wait{Hold: h, Client: c}); err != nil || w.Code != 200 ||
		!strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") || !strings.Contains(w.Body.String(), "event: error") {
		t.Errorf("stream retry: %d %s, %v", w.Code, w.Body, err)
	}
}

func TestReadOnly(t *testing.T) {
	grant := ReadOnly([]config.Tenant{{Name: "a", ReadOnlyTools: []string{"Read"}}, {Name: "b"}})
	if g := grant("a"); len(g) != 1 || g[0] != "Read" {
		t.Errorf("a: %v", g)
	}
	if g := grant("b"); g != nil {
		t.Errorf("b: %v", g)
	}
	if g := grant("z"); g != nil {
		t.Errorf("z: %v", g)
	}
}
