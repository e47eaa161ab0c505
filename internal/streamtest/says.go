package streamtest

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming/sse"
)

// Says is the text a stream carries, by kind, in the order it came, read
// straight from its events' JSON with gjson paths and no decoder, so that
// a test can tell that the text of a stream survived a filter or a
// reshaping whatever the decoders read. Each API has its reader below.
type Says struct {
	Text, Thinking, Refusal string
	Args                    string // client and server call arguments deltas
	// ByChoice is the text, thinking and refusal of each choice (Chat;
	// choice 0 elsewhere), keyed kind/choice.
	ByChoice map[string]string
}

// saysReader accumulates a Says event by event.
type saysReader struct {
	text, thinking, refusal, args strings.Builder
	byChoice                      map[string]string
}

func (r *saysReader) add(b *strings.Builder, kind string, choice int64, s string) {
	if s != "" {
		b.WriteString(s)
		r.byChoice[kind+"/"+strconv.FormatInt(choice, 10)] += s
	}
}

// read runs event over every event of stream whose data is JSON.
func read(tb testing.TB, stream []byte, event func(r *saysReader, js gjson.Result)) Says {
	tb.Helper()
	r := saysReader{byChoice: map[string]string{}}
	err := sse.Each(stream, func(ev *sse.Event) error {
		if ev.HasData && gjson.ValidBytes(ev.Data) {
			event(&r, gjson.ParseBytes(ev.Data))
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("reading what the stream says: %v", err)
	}
	return Says{Text: r.text.String(), Thinking: r.thinking.String(), Refusal: r.refusal.String(),
		Args: r.args.String(), ByChoice: r.byChoice}
}

// AnthropicSays reads what an Anthropic Messages stream says.
func AnthropicSays(tb testing.TB, stream []byte) Says {
	tb.Helper()
	return read(tb, stream, func(r *saysReader, js gjson.Result) {
		switch js.Get("type").Str {
		case "content_block_start":
			r.add(&r.text, "text", 0, js.Get("content_block.text").Str)
			r.add(&r.thinking, "thinking", 0, js.Get("content_block.thinking").Str)
		case "content_block_delta":
			switch d := js.Get("delta"); d.Get("type").Str {
			case "text_delta":
				r.add(&r.text, "text", 0, d.Get("text").Str)
			case "thinking_delta":
				r.add(&r.thinking, "thinking", 0, d.Get("thinking").Str)
			case "input_json_delta":
				r.args.WriteString(d.Get("partial_json").Str)
			}
		}
	})
}

// ChatSays reads what a Chat Completions stream says.
func ChatSays(tb testing.TB, stream []byte) Says {
	tb.Helper()
	return read(tb, stream, func(r *saysReader, js gjson.Result) {
		for _, c := range js.Get("choices").Array() {
			d, n := c.Get("delta"), c.Get("index").Int()
			r.add(&r.text, "text", n, d.Get("content").Str)
			r.add(&r.refusal, "refusal", n, d.Get("refusal").Str)
			if th := d.Get("reasoning_content").Str; th != "" {
				r.add(&r.thinking, "thinking", n, th)
			} else {
				r.add(&r.thinking, "thinking", n, d.Get("reasoning").Str)
			}
			for _, tc := range d.Get("tool_calls").Array() {
				r.args.WriteString(tc.Get("function.arguments").Str)
			}
			r.args.WriteString(d.Get("function_call.arguments").Str)
		}
	})
}

// ResponsesSays reads what a Responses stream says.
func ResponsesSays(tb testing.TB, stream []byte) Says {
	tb.Helper()
	return read(tb, stream, func(r *saysReader, js gjson.Result) {
		switch js.Get("type").Str {
		case "response.output_text.delta":
			r.add(&r.text, "text", 0, js.Get("delta").Str)
		case "response.refusal.delta":
			r.add(&r.refusal, "refusal", 0, js.Get("delta").Str)
		case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
			r.add(&r.thinking, "thinking", 0, js.Get("delta").Str)
		case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta", "response.mcp_call_arguments.delta":
			r.args.WriteString(js.Get("delta").Str)
		}
	})
}
