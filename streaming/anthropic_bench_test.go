package streaming_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"gatekeeper/streaming"
	"gatekeeper/streaming/anthropic"
	"gatekeeper/streaming/sse"
)

// benchAnthropicStream builds a stream shaped like a real one: message_start,
// one block of n deltas, message_delta and message_stop, with Anthropic's
// padding before the closing brace of each payload. Each fragment is JSON
// encoded the way the API encodes it.
func benchAnthropicStream(block string, n int, delta func(i int) string) []byte {
	var b strings.Builder
	ev := func(name, data string, pad int) {
		fmt.Fprintf(&b, "event: %s\ndata: %s%s}\n\n", name, data[:len(data)-1], strings.Repeat(" ", pad))
	}
	ev("message_start", `{"type":"message_start","message":{"model":"claude-bench","id":"msg_bench","type":"message","role":"assistant","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1200,"cache_creation_input_tokens":0,"cache_read_input_tokens":800,"output_tokens":2}}}`, 3)
	ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":`+block+`}`, 5)
	for i := range n {
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":`+delta(i)+`}`, i%16)
		if i%500 == 0 {
			b.WriteString("event: ping\ndata: {\"type\": \"ping\"}\n\n")
		}
	}
	ev("content_block_stop", `{"type":"content_block_stop","index":0}`, 2)
	ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":9000}}`, 7)
	ev("message_stop", `{"type":"message_stop"}`, 4)
	return []byte(b.String())
}

func jsonString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// benchToolStream is a large write_file call: its content arrives as
// escaped JSON inside escaped JSON, in fragments of a few dozen bytes.
func benchToolStream() []byte {
	line := `func main() { fmt.Println("hello\tworld") } // "quoted" \ path`
	args := `{"path": "/src/main.go", "content": ` + jsonString(strings.Repeat(line+"\n", 2000)) + `}`
	const size = 24
	n := (len(args) + size - 1) / size
	return benchAnthropicStream(`{"type":"tool_use","id":"toolu_bench","name":"write_file","input":{}}`, n, func(i int) string {
		frag := args[i*size : min((i+1)*size, len(args))]
		return `{"type":"input_json_delta","partial_json":` + jsonString(frag) + `}`
	})
}

// benchTextStream is a long answer in deltas of a few words.
func benchTextStream() []byte {
	words := []string{"The ", "proxy ", "reads ", "every ", "event ", "once, ", "and ", "keeps ", "only ", "what ", "it needs. "}
	return benchAnthropicStream(`{"type":"text","text":""}`, 40000, func(i int) string {
		return `{"type":"text_delta","text":` + jsonString(words[i%len(words)]+words[(i+3)%len(words)]) + `}`
	})
}

// BenchmarkAnthropicDecode measures the whole path a reply takes: the SSE
// Reader fed in network-sized chunks, then the decoder with a consumer.
func BenchmarkAnthropicDecode(b *testing.B) {
	for _, bc := range []struct {
		name string
		data []byte
	}{
		{"tool_call", benchToolStream()},
		{"long_text", benchTextStream()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const chunk = 4096
			data := bc.data
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				dec := anthropic.Dialect{}.NewDecoder()
				fn := func(ev *sse.Event) error {
					dec.Decode(ev)
					return nil
				}
				r := sse.NewReader(0)
				for off := 0; off < len(data); off += chunk {
					if err := r.Feed(data[off:min(off+chunk, len(data))], fn); err != nil {
						b.Fatal(err)
					}
				}
				if err := r.Finish(fn); err != nil {
					b.Fatal(err)
				}
				if res := dec.Finish(); !res.Done || res.Unparsed != 0 || res.OutputBytes == 0 {
					b.Fatalf("done %v unparsed %d %v output %d", res.Done, res.Unparsed, res.UnparsedErrors, res.OutputBytes)
				}
			}
		})
	}
}

// TestBenchAnthropicStreams keeps the benchmark inputs honest: they decode
// to what they were built from.
func TestBenchAnthropicStreams(t *testing.T) {
	res, _ := mustDecode(t, streaming.APIAnthropic, benchToolStream())
	if len(res.ToolCalls) != 1 || !res.ToolCalls[0].Complete || !json.Valid(res.ToolCalls[0].Arguments) || res.Unparsed != 0 {
		t.Fatalf("tool stream: %+v", res)
	}
	var in struct{ Content string }
	if err := json.Unmarshal(res.ToolCalls[0].Arguments, &in); err != nil || !strings.Contains(in.Content, `Println("hello\tworld")`) {
		t.Fatalf("tool stream arguments: %v", err)
	}
	res, said := mustDecode(t, streaming.APIAnthropic, benchTextStream())
	text := said.Text
	if !res.Done || res.OutputBytes != int64(len(text)) || !strings.HasPrefix(text, "The every proxy event ") {
		t.Fatalf("text stream: done %v output %d text %.40q", res.Done, res.OutputBytes, text)
	}
}
