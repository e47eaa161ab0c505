package mockprovider

import (
	"math/rand/v2"

	"github.com/tidwall/gjson"
)

func responsesUsage(p *plan) obj {
	u := p.usage
	prompt := u.promptTotal()
	return obj{
		{"input_tokens", prompt},
		{"input_tokens_details", obj{{"cached_tokens", u.cacheRead}}},
		{"output_tokens", u.output},
		{"output_tokens_details", obj{{"reasoning_tokens", u.reasoning}}},
		{"total_tokens", prompt + u.output},
	}
}

func terminalStatus(p *plan) string {
	if p.stop == stopMaxTokens {
		return "incomplete"
	}
	return "completed"
}

// echo returns the request's value for a Response field, or def. The
// value is compacted: a newline from a pretty-printed request would end
// the SSE data line.
func echo(v gjson.Result, def any) any {
	if !v.Exists() {
		return def
	}
	return compactRaw(v.Raw)
}

// responseObject is the Response object of the lifecycle events and of the
// non-streaming reply; errObj is set for a failed response.
func responseObject(p *plan, status string, output []obj, usage any, errObj any) obj {
	var incomplete any
	if status == "incomplete" {
		incomplete = obj{{"reason", "max_output_tokens"}}
	}
	tier := "default"
	if status == "in_progress" {
		tier = "auto"
	}
	var maxOut any
	if p.req.maxTokens > 0 {
		maxOut = p.req.maxTokens
	}
	return obj{
		{"id", p.id}, {"object", "response"}, {"created_at", p.created.Unix()}, {"status", status},
		{"background", false}, {"error", errObj}, {"incomplete_details", incomplete},
		{"instructions", echo(p.req.instructions, nil)}, {"max_output_tokens", maxOut}, {"max_tool_calls", nil},
		{"model", p.model}, {"output", output}, {"parallel_tool_calls", echo(p.req.parallelToolCalls, true)},
		{"previous_response_id", echo(p.req.previousResponseID, nil)},
		{"prompt_cache_key", echo(p.req.promptCacheKey, nil)}, {"prompt_cache_retention", nil},
		{"reasoning", obj{{"effort", nil}, {"summary", nil}}}, {"safety_identifier", echo(p.req.safetyIdentifier, nil)},
		{"service_tier", tier},
		{"store", echo(p.req.store, true)}, {"temperature", echo(p.req.temperature, 1.0)},
		{"text", obj{{"format", obj{{"type", "text"}}}}}, {"tool_choice", "auto"},
		{"tools", echo(p.req.toolsRaw, []any{})}, {"top_logprobs", 0}, {"top_p", echo(p.req.topP, 1.0)},
		{"truncation", "disabled"}, {"usage", usage}, {"user", nil}, {"metadata", echo(p.req.metadata, obj{})},
	}
}

func (p *plan) textPart(text string) obj {
	if p.refusal {
		return obj{{"type", "refusal"}, {"refusal", text}}
	}
	return obj{{"type", "output_text"}, {"annotations", []any{}}, {"logprobs", []any{}}, {"text", text}}
}

func (p *plan) messageItem(status string, content []obj) obj {
	return obj{{"id", p.itemID}, {"type", "message"}, {"status", status}, {"content", content}, {"role", "assistant"}}
}

func functionCallItem(c planCall, status, args string) obj {
	return obj{{"id", c.itemID}, {"type", "function_call"}, {"status", status}, {"arguments", args},
		{"call_id", c.id}, {"name", c.name}}
}

// The output items other than function_call a turn can script: the prefix
// of their ids, the member holding their input, and whether the provider
// runs them itself (no call_id).
var scriptedItems = map[string]struct {
	prefix, input string
	hosted        bool
}{
	"local_shell_call": {prefix: "lsh_", input: "action"},
	"shell_call":       {prefix: "sh_", input: "action"},
	"apply_patch_call": {prefix: "apc_", input: "operation"},
	"computer_call":    {prefix: "cu_", input: "action"},
	"web_search_call":  {prefix: "ws_", input: "action", hosted: true},
}

func itemIDPrefix(item string) string {
	if item == "" {
		return "fc_"
	}
	if s, ok := scriptedItems[item]; ok {
		return s.prefix
	}
	return "item_"
}

// callItem is the output item of call c: a function_call, or the item
// type it was scripted as, with its input whole.
func callItem(c planCall, status string) obj {
	if c.item == "" {
		return functionCallItem(c, status, c.args)
	}
	s, ok := scriptedItems[c.item]
	input := s.input
	if !ok {
		input = "action"
	}
	o := obj{{"id", c.itemID}, {"type", c.item}, {"status", status}}
	if !s.hosted {
		o = o.set("call_id", c.id)
	}
	o = o.set(input, raw(c.args))
	if c.item == "computer_call" {
		o = o.set("pending_safety_checks", []any{})
	}
	return o
}

// itemStatus is "incomplete" for the last item of a reply cut by the
// output limit.
func (p *plan) itemStatus(last bool) string {
	if last && p.stop == stopMaxTokens {
		return "incomplete"
	}
	return "completed"
}

// responseOutput is the final output array; the last item of a reply cut
// by the output limit is incomplete.
func responseOutput(p *plan) []obj {
	out := []obj{}
	if p.text != "" {
		out = append(out, p.messageItem(p.itemStatus(len(p.calls) == 0), []obj{p.textPart(p.text)}))
	}
	for i, c := range p.calls {
		out = append(out, callItem(c, p.itemStatus(i == len(p.calls)-1)))
	}
	return out
}

// responsesStream renders the Responses stream: response.created and
// .in_progress, then per output item its added/delta/done events, then
// response.completed (or .incomplete), with sequence_number on every event.
func responsesStream(p *plan, rnd *rand.Rand) []event {
	var events []event
	add := func(typ string, fields obj, delta bool) {
		o := append(obj{{"type", typ}, {"sequence_number", len(events)}}, fields...)
		if delta && p.req.includeObfuscation {
			o = o.set("obfuscation", base62(rnd, 1+rnd.IntN(15)))
		}
		events = append(events, event{name: typ, data: appendJSON(nil, o), delta: delta})
	}
	add("response.created", obj{{"response", responseObject(p, "in_progress", []obj{}, nil, nil)}}, false)
	add("response.in_progress", obj{{"response", responseObject(p, "in_progress", []obj{}, nil, nil)}}, false)

	index := 0
	if p.text != "" {
		at := obj{{"item_id", p.itemID}, {"output_index", index}, {"content_index", 0}}
		add("response.output_item.added", obj{{"output_index", index}, {"item", p.messageItem("in_progress", []obj{})}}, false)
		add("response.content_part.added", append(at, kv{"part", p.textPart("")}), false)
		if p.refusal {
			for _, d := range p.textDeltas {
				add("response.refusal.delta", append(at, kv{"delta", d}), true)
			}
			add("response.refusal.done", append(at, kv{"refusal", p.text}), false)
		} else {
			for _, d := range p.textDeltas {
				add("response.output_text.delta", append(at, kv{"delta", d}, kv{"logprobs", []any{}}), true)
			}
			add("response.output_text.done", append(at, kv{"text", p.text}, kv{"logprobs", []any{}}), false)
		}
		add("response.content_part.done", append(at, kv{"part", p.textPart(p.text)}), false)
		add("response.output_item.done", obj{{"output_index", index},
			{"item", p.messageItem(p.itemStatus(len(p.calls) == 0), []obj{p.textPart(p.text)})}}, false)
		index++
	}
	for i, c := range p.calls {
		if c.item != "" {
			// These items carry no argument events: the added item has
			// the input already, a hosted one says how it went between.
			add("response.output_item.added", obj{{"output_index", index}, {"item", callItem(c, "in_progress")}}, false)
			if scriptedItems[c.item].hosted {
				at := obj{{"output_index", index}, {"item_id", c.itemID}}
				for _, step := range []string{"in_progress", "searching", "completed"} {
					add("response."+c.item+"."+step, at, false)
				}
			}
			add("response.output_item.done", obj{{"output_index", index}, {"item", callItem(c, p.itemStatus(i == len(p.calls)-1))}}, false)
			index++
			continue
		}
		add("response.output_item.added", obj{{"output_index", index}, {"item", functionCallItem(c, "in_progress", "")}}, false)
		at := obj{{"item_id", c.itemID}, {"output_index", index}}
		for _, f := range c.frags {
			add("response.function_call_arguments.delta", append(at, kv{"delta", f}), true)
		}
		add("response.function_call_arguments.done", append(at, kv{"arguments", c.args}), false)
		add("response.output_item.done", obj{{"output_index", index},
			{"item", functionCallItem(c, p.itemStatus(i == len(p.calls)-1), c.args)}}, false)
		index++
	}
	status := terminalStatus(p)
	add("response."+status, obj{{"response", responseObject(p, status, responseOutput(p), responsesUsage(p), nil)}}, false)
	events[len(events)-1].trailer = true
	return events
}

// responsesErrorEvents end a failing stream the way the API does: an error
// event (the error nested under "error") and response.failed.
func responsesErrorEvents(p *plan, seq int) []event {
	e := obj{{"type", "error"}, {"sequence_number", seq}, {"error", obj{
		{"type", p.errType}, {"code", p.errType}, {"message", p.errMessage}, {"param", nil}}}}
	failed := obj{{"type", "response.failed"}, {"sequence_number", seq + 1}, {"response",
		responseObject(p, "failed", []obj{}, nil, obj{{"code", p.errType}, {"message", p.errMessage}})}}
	return []event{
		{name: "error", data: appendJSON(nil, e)},
		{name: "response.failed", data: appendJSON(nil, failed)},
	}
}
