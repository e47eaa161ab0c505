package proxy_test

import (
	"bytes"
	"testing"

	"gatekeeper/trajectory"
)

// TestErrorEventChargedFromWhatStreamed: a stream that ends with the
// provider's error event after text streamed is charged as estimated from
// that text, never with message_start's placeholder output_tokens: 1.
func TestErrorEventChargedFromWhatStreamed(t *testing.T) {
	e := newEnv(t, envOpts{})
	text := "The first part of a long answer that the provider streamed before it failed with an overloaded error event."
	resp := e.do(t, "POST", "/t/cut-error/anthropic/v1/messages", anthropicReq(true, "hi"),
		hdr("X-Mock-Turn", `{"kind":"error_midstream","text":"`+text+`","deltas":8}`)...)
	body := readAll(t, resp)
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte("event: error")) {
		t.Fatalf("status %d, want 200 ending with the error event:\n%s", resp.StatusCode, body)
	}
	var rec *trajectory.Record
	waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "cut-error"); return rec.State != trajectory.CallingModel })
	if !rec.Spend.Estimated || rec.Spend.OutputTokens <= 1 {
		t.Errorf("a reply cut by an error event charged %+v; want estimated, with the output that streamed\nevents: %+v", rec.Spend, e.events(t, "cut-error"))
	}
}
