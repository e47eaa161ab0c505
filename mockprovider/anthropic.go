package mockprovider

import (
	"encoding/json"
	"math/rand/v2"
)

func (s stopReason) anthropic() string {
	switch s {
	case stopToolUse:
		return "tool_use"
	case stopMaxTokens:
		return "max_tokens"
	case stopRefusal:
		return "refusal"
	}
	return "end_turn"
}

func anthropicUsage(u usageCounts, output int64) obj {
	return obj{
		{"input_tokens", u.input},
		{"cache_creation_input_tokens", u.cacheWrite},
		{"cache_read_input_tokens", u.cacheRead},
		{"cache_creation", obj{{"ephemeral_5m_input_tokens", u.cacheWrite}, {"ephemeral_1h_input_tokens", 0}}},
		{"output_tokens", output},
		{"service_tier", "standard"},
		{"inference_geo", "not_available"},
	}
}

// anthropicStream renders the Messages stream: message_start, a ping after
// the first block starts, the blocks (thinking, text, tool_use) with their
// deltas, message_delta with the stop reason and cumulative usage, and
// message_stop.
func anthropicStream(p *plan, rnd *rand.Rand) []event {
	var events []event
	add := func(name string, o obj, delta bool) {
		events = append(events, event{name: name, data: pad(rnd, appendJSON(nil, o)), delta: delta})
	}
	add("message_start", obj{{"type", "message_start"}, {"message", obj{
		{"model", p.model}, {"id", p.id}, {"type", "message"}, {"role", "assistant"},
		{"content", []any{}}, {"stop_reason", nil}, {"stop_sequence", nil},
		{"usage", anthropicUsage(p.usage, 1)},
	}}}, false)

	index := 0
	pinged := false
	start := func(block obj) {
		add("content_block_start", obj{{"type", "content_block_start"}, {"index", index}, {"content_block", block}}, false)
		if !pinged {
			events = append(events, event{name: "ping", data: []byte(`{"type": "ping"}`)})
			pinged = true
		}
	}
	delta := func(d obj, isContent bool) {
		add("content_block_delta", obj{{"type", "content_block_delta"}, {"index", index}, {"delta", d}}, isContent)
	}
	stop := func() {
		add("content_block_stop", obj{{"type", "content_block_stop"}, {"index", index}}, false)
		index++
	}

	if p.thinking != "" {
		start(obj{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}})
		for _, d := range p.thinkingDeltas {
			delta(obj{{"type", "thinking_delta"}, {"thinking", d}}, false)
		}
		delta(obj{{"type", "thinking_delta"}, {"thinking", ""}}, false)
		delta(obj{{"type", "signature_delta"}, {"signature", p.signature}}, false)
		stop()
	}
	if p.text != "" {
		start(obj{{"type", "text"}, {"text", ""}})
		for _, d := range p.textDeltas {
			delta(obj{{"type", "text_delta"}, {"text", d}}, true)
		}
		stop()
	}
	for _, c := range p.calls {
		start(obj{{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", obj{}}})
		delta(obj{{"type", "input_json_delta"}, {"partial_json", ""}}, false)
		for _, f := range c.frags {
			delta(obj{{"type", "input_json_delta"}, {"partial_json", f}}, true)
		}
		stop()
	}
	if !pinged {
		events = append(events, event{name: "ping", data: []byte(`{"type": "ping"}`)})
	}

	d := obj{{"stop_reason", p.stop.anthropic()}, {"stop_sequence", nil}}
	if p.stop == stopRefusal {
		d = d.set("stop_details", obj{{"type", "refusal"}, {"category", nil}, {"explanation", nil}})
	}
	u := p.usage
	add("message_delta", obj{{"type", "message_delta"}, {"delta", d}, {"usage", obj{
		{"input_tokens", u.input},
		{"cache_creation_input_tokens", u.cacheWrite},
		{"cache_read_input_tokens", u.cacheRead},
		{"output_tokens", u.output},
	}}}, false)
	events[len(events)-1].trailer = true
	add("message_stop", obj{{"type", "message_stop"}}, false)
	events[len(events)-1].trailer = true
	return events
}

// pad adds the run of spaces Anthropic puts before the closing brace of
// most payloads, so that consumers parse JSON instead of matching bytes.
func pad(rnd *rand.Rand, b []byte) []byte {
	if rnd.IntN(8) == 0 {
		return b
	}
	n := 1 + rnd.IntN(15)
	out := make([]byte, 0, len(b)+n)
	out = append(out, b[:len(b)-1]...)
	for range n {
		out = append(out, ' ')
	}
	return append(out, '}')
}

func anthropicErrorEvent(p *plan, requestID string) event {
	o := obj{{"type", "error"}, {"error", obj{{"details", nil}, {"type", p.errType}, {"message", p.errMessage}}}, {"request_id", requestID}}
	return event{name: "error", data: appendJSON(nil, o)}
}

// anthropicMessage is the non-streaming Message with the same content.
func anthropicMessage(p *plan) obj {
	content := []obj{}
	if p.thinking != "" {
		content = append(content, obj{{"type", "thinking"}, {"thinking", p.thinking}, {"signature", p.signature}})
	}
	if p.text != "" {
		content = append(content, obj{{"type", "text"}, {"text", p.text}})
	}
	for _, c := range p.calls {
		// A call cut by max_tokens (or scripted with broken arguments) has
		// no valid input object; the block stays so that the reply still
		// reads as "stopped during tool_use".
		input := any(raw(c.args))
		if c.cut || !json.Valid([]byte(c.args)) {
			input = obj{}
		}
		content = append(content, obj{{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", input}})
	}
	m := obj{
		{"id", p.id}, {"type", "message"}, {"role", "assistant"}, {"model", p.model},
		{"content", content}, {"stop_reason", p.stop.anthropic()}, {"stop_sequence", nil},
	}
	if p.stop == stopRefusal {
		m = m.set("stop_details", obj{{"type", "refusal"}, {"category", nil}, {"explanation", nil}})
	}
	return m.set("usage", anthropicUsage(p.usage, p.usage.output))
}
