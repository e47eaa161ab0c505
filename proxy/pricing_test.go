package proxy_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"gatekeeper/meter"
	"gatekeeper/trajectory"
)

// TestReplyPricedAsReported: a turn is priced for the model the reply
// names, with its 1-hour cache writes at the 1-hour rate and the
// service tier the reply reports, streamed or not.
func TestReplyPricedAsReported(t *testing.T) {
	const usage = `{"input_tokens":100,"cache_read_input_tokens":0,"cache_creation_input_tokens":3000,` +
		`"cache_creation":{"ephemeral_5m_input_tokens":1000,"ephemeral_1h_input_tokens":2000},"output_tokens":50,"service_tier":"batch"}`
	const model = "claude-haiku-4-5-20251001"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("stream") == "" && r.Header.Get("X-Test-Stream") == "" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"msg_1","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","stop_sequence":null,"usage":%s}`, model, usage)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":%q,\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":%s}}\n\n", model, usage)
		fmt.Fprint(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
		fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\n")
		fmt.Fprint(w, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
		fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":50}}\n\n")
		fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}))
	t.Cleanup(up.Close)
	// claude-haiku-4-5: $1 input, $1.25 5-minute write, $2 1-hour write,
	// $5 output; batch halves it: (100×1 + 1000×1.25 + 2000×2 + 50×5) / 2 µ$.
	want := (100*1 + 1000*1.25 + 2000*2 + 50*5) / 2.0
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			e := newEnv(t, envOpts{upstream: up.URL})
			// The request names another model: the reply's is charged.
			body := anthropicReq(stream, "hello")
			extra := []string{}
			if stream {
				extra = []string{"X-Test-Stream", "1"}
			}
			resp := e.do(t, "POST", "/t/priced/anthropic/v1/messages", body, hdr(extra...)...)
			if b := readAll(t, resp); resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			var rec *trajectory.Record
			waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "priced"); return rec.Turns == 1 })
			if got := rec.Spend.Dollars; got != meter.ToDollars(int64(want+0.5)) || rec.FallbackPriced || rec.Spend.Estimated {
				t.Errorf("charged $%v (fallback %v, estimated %v), want $%v", got, rec.FallbackPriced, rec.Spend.Estimated, want/1e6)
			}
		})
	}
}
