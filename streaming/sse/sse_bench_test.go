package sse

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"

	"gatekeeper/internal/fixturetest"
)

// benchStreamSize is the size of each generated benchmark stream.
const benchStreamSize = 4 << 20

// argsText is the tool input the tool-call stream spells out, already
// escaped as it appears inside partial_json.
const argsText = `{\"path\": \"internal/proxy/handler.go\", \"old_string\": \"func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {\\n\\tctx := r.Context()\\n\", \"new_string\": \"func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {\\n\\tctx, cancel := context.WithCancel(r.Context())\\n\\tdefer cancel()\\n\"}`

// anthropicToolStream is an Anthropic Messages stream of one tool_use block
// whose input arrives as input_json_delta events of 1 to 40 bytes, with the
// space padding real Anthropic payloads carry, until it is size bytes long.
func anthropicToolStream(size int) (stream []byte, events int) {
	rng := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 0, size+4096)
	add := func(name, data string) {
		b = append(b, "event: "...)
		b = append(b, name...)
		b = append(b, "\ndata: "...)
		b = append(b, data...)
		b = append(b, "\n\n"...)
		events++
	}
	add("message_start", `{"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"claude-bench","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":90210,"output_tokens":1}}      }`)
	add("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_bench","name":"Edit","input":{}}   }`)
	pos := 0
	for len(b) < size {
		if pos >= len(argsText) {
			pos = 0
		}
		n := min(1+rng.IntN(40), len(argsText)-pos)
		for pos+n < len(argsText) && argsText[pos+n-1] == '\\' {
			n++ // never end a fragment inside an escape
		}
		frag := argsText[pos : pos+n]
		pos += n
		pad := rng.IntN(13)
		add("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"`+frag+`"}}`+spaces[:pad])
		if rng.IntN(500) == 0 {
			add("ping", `{"type": "ping"}`)
		}
	}
	add("content_block_stop", `{"type":"content_block_stop","index":0 }`)
	add("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":4096}     }`)
	add("message_stop", `{"type":"message_stop"    }`)
	return b, events
}

const spaces = "                "

// words make up the generated text.
var words = []string{"the", "proxy", "forwards", "every", "byte", "while", "it", "reads", "stop", "reasons,",
	"tool", "calls", "and", "usage;", "a", "held", "call", "waits", "for", "approval.", "Budgets", "are", "checked"}

// chatTextStream is an OpenAI Chat Completions stream of text deltas of one
// to six words, each chunk carrying the usual envelope and an obfuscation
// field, until it is size bytes long; it ends with usage and [DONE].
func chatTextStream(size int) (stream []byte, events int) {
	rng := rand.New(rand.NewPCG(3, 4))
	b := make([]byte, 0, size+4096)
	add := func(data string) {
		b = append(b, "data: "...)
		b = append(b, data...)
		b = append(b, "\n\n"...)
		events++
	}
	const head = `{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1767225600,"model":"gpt-bench","system_fingerprint":"fp_bench","choices":[{"index":0,"delta":{"content":"`
	add(head[:len(head)-len(`"content":"`)] + `"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}`)
	for len(b) < size {
		text := ""
		for i := range 1 + rng.IntN(6) {
			if i > 0 || rng.IntN(2) == 0 {
				text += " "
			}
			text += words[rng.IntN(len(words))]
		}
		add(head + text + `"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"` + strconv.FormatUint(rng.Uint64(), 36) + `"}`)
	}
	add(head[:len(head)-len(`"content":"`)] + `},"logprobs":null,"finish_reason":"stop"}],"usage":null}`)
	add(`{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1767225600,"model":"gpt-bench","choices":[],"usage":{"prompt_tokens":90210,"completion_tokens":4096,"total_tokens":94306}}`)
	add("[DONE]")
	return b, events
}

// largeEventStream is one Anthropic event of about size bytes, the shape of
// a web search result or a base64 image in a tool result: a single line far
// longer than any read.
func largeEventStream(size int) (stream []byte, events int) {
	rng := rand.New(rand.NewPCG(5, 6))
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	b := make([]byte, 0, size+256)
	b = append(b, `event: content_block_start`+"\n"+`data: {"type":"content_block_start","index":1,"content_block":{"type":"web_search_tool_result","content":[{"type":"web_search_result","encrypted_content":"`...)
	for len(b) < size {
		b = append(b, alphabet[rng.IntN(len(alphabet))])
	}
	b = append(b, `"}]}}`+"\n\n"...)
	return b, 1
}

// BenchmarkReader measures the Reader on generated multi-megabyte streams
// fed in network-sized reads. "stream" builds a Reader per stream (its
// buffers grow once); "steady" keeps one Reader fed with the stream again
// and again, which is the per-event cost once warmed up.
func BenchmarkReader(b *testing.B) {
	streams := []struct {
		name string
		gen  func(int) ([]byte, int)
	}{
		{"anthropic-tool-args", anthropicToolStream},
		{"chat-text", chatTextStream},
		{"one-large-event", largeEventStream},
	}
	for _, s := range streams {
		stream, events := s.gen(benchStreamSize)
		for _, read := range []int{4 << 10, 16 << 10} {
			chunks := fixturetest.BySize(stream, read)
			name := fmt.Sprintf("%s/%dKiB", s.name, read>>10)
			b.Run(name+"/stream", func(b *testing.B) {
				benchFeed(b, stream, chunks, events, false)
			})
			b.Run(name+"/steady", func(b *testing.B) {
				benchFeed(b, stream, chunks, events, true)
			})
		}
	}
}

func benchFeed(b *testing.B, stream []byte, chunks [][]byte, events int, reuse bool) {
	seen, dataBytes := 0, 0
	fn := func(ev *Event) error {
		seen++
		dataBytes += len(ev.Data)
		return nil
	}
	r := NewReader(0)
	if reuse {
		for _, c := range chunks { // warm up
			if err := r.Feed(c, fn); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	seen = 0
	b.ResetTimer()
	for range b.N {
		if !reuse {
			r = NewReader(0)
		}
		for _, c := range chunks {
			if err := r.Feed(c, fn); err != nil {
				b.Fatal(err)
			}
		}
		if !reuse {
			if err := r.Finish(fn); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	if seen != b.N*events {
		b.Fatalf("dispatched %d events, want %d", seen, b.N*events)
	}
	total := float64(b.N) * float64(events)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/total, "allocs/event")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/total, "ns/event")
	b.ReportMetric(float64(events), "events/op")
}

// TestBenchStreams keeps the generated streams honest: valid framing, the
// expected event count, and the size asked for.
func TestBenchStreams(t *testing.T) {
	for _, gen := range []func(int) ([]byte, int){anthropicToolStream, chatTextStream, largeEventStream} {
		stream, events := gen(64 << 10)
		got, err := run(t, 0, fixturetest.BySize(stream, 4096))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != events || len(stream) < 64<<10 {
			t.Fatalf("%d events of %d bytes, want %d events of at least %d bytes", len(got), len(stream), events, 64<<10)
		}
		for i, e := range got {
			if !e.HasData || e.Unterminated || e.Data != "[DONE]" && !json.Valid([]byte(e.Data)) {
				t.Fatalf("event %d is not a whole JSON data event: %+v", i, e)
			}
		}
	}
}
