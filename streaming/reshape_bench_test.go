package streaming_test

import (
	"strings"
	"testing"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/internal/streamtest"
	"gatekeeper/streaming"
)

// benchHeldReply is an Anthropic reply of about size bytes: text in many
// deltas, then a tool call, as a held reply is kept.
func benchHeldReply(tb testing.TB, size int) []byte {
	tb.Helper()
	var b strings.Builder
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_bench\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":900,\"output_tokens\":1}}}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	for b.Len() < size {
		b.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"the held reply goes on and on, \"}}\n\n")
	}
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_bench\",\"name\":\"Bash\",\"input\":{}}}\n\n")
	b.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"command\\\": \\\"rm -rf /tmp/x\\\"}\"}}\n\n")
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n")
	b.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":5000}}\n\n")
	b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	return []byte(b.String())
}

// BenchmarkEscrowReshape measures what releasing a held reply in another
// form costs, next to decoding it once (Decode is the baseline).
func BenchmarkEscrowReshape(b *testing.B) {
	stream := benchHeldReply(b, 256<<10)
	body, err := dialects[streaming.APIAnthropic].AssembleJSON(stream)
	if err != nil {
		b.Fatal(err)
	}
	cont := fixturetest.ReadFile(b, anthropicTestdata, "text.sse")
	run := func(name string, fn func() error) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(stream)))
			for b.Loop() {
				if err := fn(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	run("Decode", func() error {
		_, err := streamtest.Decode(dialects[streaming.APIAnthropic], 0, fixturetest.Whole(stream))
		return err
	})
	run("AssembleJSON", func() error { _, err := dialects[streaming.APIAnthropic].AssembleJSON(stream); return err })
	run("RenderSSE", func() error { _, err := dialects[streaming.APIAnthropic].RenderSSE(body); return err })
	run("SpliceStream", func() error { _, err := dialects[streaming.APIAnthropic].SpliceStream(stream, cont); return err })
	run("Continuation", func() error {
		_, err := dialects[streaming.APIAnthropic].Continuation([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), stream, true,
			map[string][]byte{"": []byte(`{"status":"REFUSED"}`)})

		return err
	})
}
