package mockprovider

import (
	"math/rand/v2"
)

func (s stopReason) chat() string {
	switch s {
	case stopToolUse:
		return "tool_calls"
	case stopMaxTokens:
		return "length"
	}
	return "stop" // refusals finish with "stop" too
}

func chatUsage(u usageCounts) obj {
	prompt := u.promptTotal()
	return obj{
		{"prompt_tokens", prompt},
		{"completion_tokens", u.output},
		{"total_tokens", prompt + u.output},
		{"prompt_tokens_details", obj{{"cached_tokens", u.cacheRead}, {"audio_tokens", 0}}},
		{"completion_tokens_details", obj{{"reasoning_tokens", u.reasoning}, {"audio_tokens", 0},
			{"accepted_prediction_tokens", 0}, {"rejected_prediction_tokens", 0}}},
	}
}

// chatStream renders the Chat Completions stream: a role chunk, content
// (or refusal) deltas, tool-call chunks (id, type and name only in the
// first fragment of each call), the finish chunk, the usage chunk with
// empty choices when stream_options.include_usage is set, and [DONE].
func chatStream(p *plan, rnd *rand.Rand) []event {
	var events []event
	chunk := func(choices []obj, usage any, delta, trailer bool) {
		c := obj{
			{"id", p.id}, {"object", "chat.completion.chunk"}, {"created", p.created.Unix()},
			{"model", p.model}, {"service_tier", "default"}, {"system_fingerprint", p.fingerprint},
		}
		// The API puts the null usage before the choices of content
		// chunks and after them on the finish and usage chunks.
		switch {
		case !p.req.includeUsage:
			c = c.set("choices", choices)
		case trailer:
			c = c.set("choices", choices).set("usage", usage)
		default:
			c = c.set("usage", usage).set("choices", choices)
		}
		if p.req.includeObfuscation {
			c = c.set("obfuscation", base62(rnd, 1+rnd.IntN(15)))
		}
		events = append(events, event{data: appendJSON(nil, c), delta: delta, trailer: trailer})
	}
	choice := func(d obj, finish any) []obj {
		return []obj{{{"index", 0}, {"delta", d}, {"logprobs", nil}, {"finish_reason", finish}}}
	}

	role := obj{{"role", "assistant"}}
	switch {
	case p.refusal:
		role = append(role, kv{"content", nil}, kv{"refusal", ""})
	case p.text == "" && len(p.calls) > 0:
		role = append(role, kv{"content", nil})
	default:
		role = append(role, kv{"content", ""}, kv{"refusal", nil})
	}
	chunk(choice(role, nil), nil, false, false)
	for _, d := range p.textDeltas {
		key := "content"
		if p.refusal {
			key = "refusal"
		}
		chunk(choice(obj{{key, d}}, nil), nil, true, false)
	}
	for i, c := range p.calls {
		chunk(choice(obj{{"tool_calls", []obj{{{"index", i}, {"id", c.id}, {"type", "function"},
			{"function", obj{{"name", c.name}, {"arguments", ""}}}}}}}, nil), nil, false, false)
		for _, f := range c.frags {
			chunk(choice(obj{{"tool_calls", []obj{{{"index", i}, {"function", obj{{"arguments", f}}}}}}}, nil), nil, true, false)
		}
	}
	chunk(choice(obj{}, p.stop.chat()), nil, false, true)
	if p.req.includeUsage {
		chunk([]obj{}, chatUsage(p.usage), false, true)
	}
	events = append(events, event{data: []byte("[DONE]"), trailer: true})
	return events
}

// chatErrorEvent is OpenAI's in-stream error: a data line holding only an
// error object, after which the stream ends without [DONE].
func chatErrorEvent(p *plan) event {
	return event{data: appendJSON(nil, openAIError(p.errType, p.errMessage, nil, nil))}
}

// chatCompletion is the non-streaming chat.completion with the same content.
func chatCompletion(p *plan) obj {
	msg := obj{{"role", "assistant"}}
	switch {
	case p.refusal:
		msg = append(msg, kv{"content", nil}, kv{"refusal", p.text})
	case p.text == "":
		msg = append(msg, kv{"content", nil}, kv{"refusal", nil})
	default:
		msg = append(msg, kv{"content", p.text}, kv{"refusal", nil})
	}
	if len(p.calls) > 0 {
		calls := make([]obj, 0, len(p.calls))
		for _, c := range p.calls {
			calls = append(calls, obj{{"id", c.id}, {"type", "function"},
				{"function", obj{{"name", c.name}, {"arguments", c.args}}}})
		}
		msg = msg.set("tool_calls", calls)
	}
	msg = msg.set("annotations", []any{})
	return obj{
		{"id", p.id}, {"object", "chat.completion"}, {"created", p.created.Unix()}, {"model", p.model},
		{"choices", []obj{{{"index", 0}, {"message", msg}, {"logprobs", nil}, {"finish_reason", p.stop.chat()}}}},
		{"usage", chatUsage(p.usage)},
		{"service_tier", "default"}, {"system_fingerprint", p.fingerprint},
	}
}
