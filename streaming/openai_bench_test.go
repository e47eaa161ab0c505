package streaming_test

import (
	"fmt"
	"strings"
	"testing"

	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// openAIBenchChatStream builds a Chat Completions reply of calls parallel
// tool calls, each with argument text of about argBytes streamed in
// fragments of a few bytes, as gpt-4o streams them.
func openAIBenchChatStream(calls, argBytes int) []byte {
	var b strings.Builder
	head := `{"id":"chatcmpl-BENCH","object":"chat.completion.chunk","created":1727300000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_b","choices":[{"index":0,"delta":`
	tail := `,"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"Xy7pQ"}`
	chunk := func(delta string) {
		b.WriteString("data: " + head + delta + tail + "\n\n")
	}
	chunk(`{"role":"assistant","content":null}`)
	frags := []string{`{\"pa`, `th\": \"`, `src/`, `main`, `.go\", `, `\"body\"`, `: \"pac`, `kage `, `main\\n`, `\\nfunc`, ` main() {`, `}\\n\"`}
	for c := range calls {
		chunk(fmt.Sprintf(`{"tool_calls":[{"index":%d,"id":"call_%04d","type":"function","function":{"name":"write_file","arguments":""}}]}`, c, c))
		for n, i := 0, 0; n < argBytes; i++ {
			f := frags[i%len(frags)]
			chunk(fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":"%s"}}]}`, c, f))
			n += len(f)
		}
	}
	b.WriteString("data: " + head + `{}` + strings.Replace(tail, `"finish_reason":null`, `"finish_reason":"tool_calls"`, 1) + "\n\n")
	b.WriteString(`data: {"id":"chatcmpl-BENCH","object":"chat.completion.chunk","created":1727300000,"model":"gpt-4o-2024-08-06","choices":[],"usage":{"prompt_tokens":52000,"completion_tokens":9000,"total_tokens":61000,"prompt_tokens_details":{"cached_tokens":48000}}}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	return []byte(b.String())
}

// openAIBenchResponsesStream builds a Responses text reply of n deltas
// carrying sequence numbers and obfuscation, as current streams do.
func openAIBenchResponsesStream(n int) []byte {
	var b strings.Builder
	seq := 0
	event := func(typ, body string) {
		fmt.Fprintf(&b, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,%s}\n\n", typ, typ, seq, body)
		seq++
	}
	resp := `"response":{"id":"resp_BENCH","object":"response","created_at":1751569118,"status":"%s","model":"gpt-4.1-2025-04-14","output":[],"usage":%s}`
	event("response.created", fmt.Sprintf(resp, "in_progress", "null"))
	event("response.output_item.added", `"output_index":0,"item":{"id":"msg_BENCH","type":"message","status":"in_progress","content":[],"role":"assistant"}`)
	words := []string{" the", " proxy", " forwards", " every", " byte", ",", " and", " the", " decoder", " reads", " it", "."}
	for i := range n {
		event("response.output_text.delta", fmt.Sprintf(`"item_id":"msg_BENCH","output_index":0,"content_index":0,"delta":%q,"logprobs":[],"obfuscation":"k3Jd9"`, words[i%len(words)]))
	}
	event("response.completed", fmt.Sprintf(resp, "completed", `{"input_tokens":1515,"input_tokens_details":{"cached_tokens":1390},"output_tokens":4000,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":5515}`))
	return []byte(b.String())
}

// openAIBenchDecode runs stream through a Reader and decoder in network
// sized reads, the way the proxy tees a reply.
func openAIBenchDecode(b *testing.B, api streaming.API, stream []byte) {
	const read = 4 << 10
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		dec := dialects[api].NewDecoder()
		fn := func(ev *sse.Event) error {
			dec.Decode(ev)
			return nil
		}
		r := sse.NewReader(0)
		for off := 0; off < len(stream); off += read {
			if err := r.Feed(stream[off:min(off+read, len(stream))], fn); err != nil {
				b.Fatal(err)
			}
		}
		if err := r.Finish(fn); err != nil {
			b.Fatal(err)
		}
		if res := dec.Finish(); !res.Done || res.Truncated || res.Unparsed != 0 || res.OutputBytes == 0 {
			b.Fatalf("bad decode: %+v", res)
		}
	}
}

func BenchmarkChatToolCallStream(b *testing.B) {
	openAIBenchDecode(b, streaming.APIChat, openAIBenchChatStream(8, 16<<10))
}

func BenchmarkResponsesTextStream(b *testing.B) {
	openAIBenchDecode(b, streaming.APIResponses, openAIBenchResponsesStream(20000))
}

// TestOpenAIBenchStreams keeps the generated streams honest: they decode to
// what they were built to hold.
func TestOpenAIBenchStreams(t *testing.T) {
	res, _ := mustDecode(t, streaming.APIChat, openAIBenchChatStream(3, 256))
	if len(res.ToolCalls) != 3 || !res.ToolCalls[2].Complete || res.Usage.CachedInputTokens != 48000 || res.Unparsed != 0 {
		t.Errorf("chat bench stream decoded to %+v", res)
	}
	if args := string(res.ToolCalls[0].Arguments); !strings.HasPrefix(args, `{"path": "src/main.go", "body": "package main\n\nfunc main() {}\n"{"pa`) {
		t.Errorf("arguments %q", args)
	}
	res, _ = mustDecode(t, streaming.APIResponses, openAIBenchResponsesStream(100))
	if res.StopReason() != streaming.StopEndTurn || res.OutputBytes == 0 || res.Usage.OutputTokens != 4000 || res.Unparsed != 0 {
		t.Errorf("responses bench stream decoded to %+v", res)
	}
}
