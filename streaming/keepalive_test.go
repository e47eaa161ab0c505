package streaming_test

import (
	"bytes"
	"testing"

	"gatekeeper/streaming"
	"gatekeeper/streaming/anthropic"
	"gatekeeper/streaming/chat"
	"gatekeeper/streaming/responses"
	"gatekeeper/streaming/sse"
)

// TestKeepalive: which keepalive a held stream gets, by dialect and by
// what went out before the hold.
func TestKeepalive(t *testing.T) {
	created := []byte(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[],"model":"gpt-4.1"}}`)
	progress := []byte("event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{\"id\":\"resp_1\"}}\n\n")
	ping := "event: ping\ndata: {\"type\": \"ping\"}\n\n"
	comment := ": keepalive\n\n"
	cases := []struct {
		name string
		d    streaming.Dialect
		evs  []sse.Event
		out  streaming.Usage
		want string
	}{
		{"anthropic before message_start", anthropic.Dialect{}, nil, streaming.Usage{}, ping},
		{"anthropic after message_start", anthropic.Dialect{},
			[]sse.Event{{Name: []byte("message_start")}, {Name: []byte("content_block_start")}}, streaming.Usage{OutputTokens: 3},
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":null,\"stop_sequence\":null},\"usage\":{\"output_tokens\":3}}\n\n"},
		{"responses before created", responses.Dialect{}, nil, streaming.Usage{}, comment},
		{"responses created only", responses.Dialect{}, []sse.Event{{Name: []byte("response.created"), Data: created}}, streaming.Usage{},
			"event: response.in_progress\ndata: {\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[],\"model\":\"gpt-4.1\"},\"sequence_number\":0,\"type\":\"response.in_progress\"}\n\n"},
		{"responses in_progress repeated as sent", responses.Dialect{},
			[]sse.Event{{Name: []byte("response.created"), Data: created}, {Name: []byte("response.in_progress"), Raw: progress}}, streaming.Usage{},
			string(progress)},
		{"chat", chat.Dialect{}, []sse.Event{{Name: []byte("x"), Data: []byte("{}")}}, streaming.Usage{}, comment},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := tc.d.NewKeepalive()
			for i := range tc.evs {
				k.Forwarded(&tc.evs[i], &streaming.Result{Usage: tc.out})
			}
			got := k.Event()
			if string(got) != tc.want {
				t.Fatalf("keepalive %q, want %q", got, tc.want)
			}
			n := 0
			if err := sse.NewReader(0).Feed(got, func(*sse.Event) error { n++; return nil }); err != nil || n > 1 {
				t.Fatalf("keepalive %q: %d events, %v", got, n, err)
			}
			if !bytes.HasSuffix(got, []byte("\n\n")) {
				t.Fatalf("keepalive %q does not end its event", got)
			}
		})
	}
}
