package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"gatekeeper/approvals"
)

// heldDeliveredMsg is the one answer a request of a held turn gets once
// another request of the turn took the decided reply (docs/guide/approvals.md, "How a held
// call behaves": 409, invalid_request_error, x-should-retry false; an
// error event when its stream is open).
const heldDeliveredMsg = "this turn's reply, held for approval, was already delivered to another request of the same turn; continue from it"

// rawTurn is one Anthropic turn that the mock answers with a gated Bash
// call; stream picks the form.
func rawTurn(stream bool) string {
	return `{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":` + map[bool]string{true: "true", false: "false"}[stream] +
		`,"messages":[{"role":"user","content":"clean"}],` +
		`"tools":[{"name":"Bash","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}}]}`
}

// errorOf is the error an Anthropic error body, or the data of a stream's
// error event, carries; ok is false when b holds none.
func errorOf(b []byte) (typ, msg string, ok bool) {
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) != nil || e.Type != "error" {
		return "", "", false
	}
	return e.Error.Type, e.Error.Message, true
}

// streamError is the error event that ends stream b.
func streamError(b []byte) (typ, msg string, ok bool) {
	for ev := range bytes.SplitSeq(b, []byte("\n\n")) {
		if !bytes.HasPrefix(ev, []byte("event: error\n")) {
			continue
		}
		for line := range bytes.SplitSeq(ev, []byte("\n")) {
			if data, found := bytes.CutPrefix(line, []byte("data: ")); found {
				return errorOf(data)
			}
		}
	}
	return "", "", false
}

type rawResult struct {
	status int
	hdr    http.Header
	body   []byte
	err    error
}

// postRaw sends body to the turn route of trajectory and reads the whole
// answer; started is closed once the response's head arrived.
func postRaw(ctx context.Context, url, spec, body string, started chan<- struct{}) rawResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return rawResult{err: err}
	}
	for i := 0; i+1 < len(anthropicHdr); i += 2 {
		req.Header.Set(anthropicHdr[i], anthropicHdr[i+1])
	}
	req.Header.Set("X-Mock-Turn", spec)
	resp, err := http.DefaultClient.Do(req)
	if started != nil {
		close(started)
	}
	if err != nil {
		return rawResult{err: err}
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	return rawResult{status: resp.StatusCode, hdr: resp.Header, body: buf.Bytes(), err: err}
}

// TestEscrowDeliveredElsewhereEveryForm: three clients wait on one held
// turn when another request of the turn (here, one on another replica)
// takes its decided reply: the original stream, a streamed retry and a
// non-streamed retry. Each is told the same thing in its form: the open
// streams end with an invalid_request_error event, the JSON request gets
// 409 with x-should-retry false; and so does a request of the turn that
// comes after.
func TestEscrowDeliveredElsewhereEveryForm(t *testing.T) {
	logs := &lockedBuffer{}
	e := newEnv(t, envOpts{limits: gatesYAML("", ""), log: logs})
	spec := bashTurn("rm -rf ./build")
	url := e.gk + "/t/esc-elsewhere/anthropic/v1/messages"
	results := map[string]chan rawResult{"stream": make(chan rawResult, 1), "stream retry": make(chan rawResult, 1), "json retry": make(chan rawResult, 1)}
	go func() { results["stream"] <- postRaw(ctxT(t), url, spec, rawTurn(true), nil) }()
	r := e.pending(t, "esc-elsewhere", 1)[0]
	retryOpen := make(chan struct{})
	go func() { results["stream retry"] <- postRaw(ctxT(t), url, spec, rawTurn(true), retryOpen) }()
	go func() { results["json retry"] <- postRaw(ctxT(t), url, spec, rawTurn(false), nil) }()
	<-retryOpen
	waitFor(t, "both retries re-attached", func() bool {
		return strings.Count(logs.String(), "request re-attached to a held turn") == 2
	})

	// Another replica's client claims the decided reply.
	if _, err := e.apst.UpdateHold(context.Background(), r.Hold, func(h *approvals.Hold) error {
		h.Delivered = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if code := e.adminVote(t, r.ID, carolToken, "approve"); code != 200 {
		t.Fatalf("approve: %d", code)
	}
	for name, ch := range results {
		var res rawResult
		select {
		case res = <-ch:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: no answer", name)
		}
		if res.err != nil {
			t.Fatalf("%s: %v", name, res.err)
		}
		typ, msg, ok := streamError(res.body)
		wantStatus := http.StatusOK
		if name == "json retry" {
			typ, msg, ok = errorOf(res.body)
			wantStatus = http.StatusConflict
			if got := res.hdr.Get("X-Should-Retry"); got != "false" {
				t.Errorf("%s: x-should-retry %q, want false", name, got)
			}
		}
		if res.status != wantStatus || !ok || typ != "invalid_request_error" || msg != heldDeliveredMsg {
			t.Errorf("%s: status %d, error %q %q (found %v); want %d, invalid_request_error %q\n%s",
				name, res.status, typ, msg, ok, wantStatus, heldDeliveredMsg, res.body)
		}
		if strings.Contains(string(res.body), "tool_use") {
			t.Errorf("%s: the held call reached a client that was told it went elsewhere:\n%s", name, res.body)
		}
	}

	// A request of the turn after the delivery is refused at admission,
	// in either form, with the same answer.
	for _, stream := range []bool{true, false} {
		res := postRaw(ctxT(t), url, spec, rawTurn(stream), nil)
		typ, msg, ok := errorOf(res.body)
		if res.err != nil || res.status != http.StatusConflict || !ok || typ != "invalid_request_error" || msg != heldDeliveredMsg ||
			res.hdr.Get("X-Should-Retry") != "false" {
			t.Errorf("a later request (stream %v): %d %v %s", stream, res.status, res.err, res.body)
		}
	}
	if n := len(e.turnRequests()); n != 1 {
		t.Fatalf("mock saw %d turn requests, want 1", n)
	}
}
