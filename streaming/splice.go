package streaming

import (
	"fmt"
	"strings"

	"gatekeeper/streaming/sse"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming/internal/jsonscan"

	"gatekeeper/streaming/internal/callitems"
)

// Joining a reply and its continuation into one.
//
// The agent already holds the start of the first reply: the filter (with
// Hold) let through everything before the stop and kept the calls. The
// spliced stream therefore begins with exactly what that filter gives for
// the first reply's events before its stop (it is computed by running
// one), so that a filter reading the spliced stream passes that prefix as
// it is and the proxy can send only what follows it. The continuation's
// content follows, renumbered after the first reply's, and its stop ends
// the whole.

// SpliceStream returns one stream that reads as a single reply: first
// without its client tool calls and without its stop and terminal events,
// then cont's content (its start events dropped; indices, output_index and
// sequence_number renumbered to follow first's), cont's stop and terminal
// events, with usage summed over both calls. ids and model stay first's.
//
// Both streams must be whole replies (ErrIncompleteStream otherwise).
// first's part is what a CallFilter in Hold mode that refuses nothing gives
// for first's events before its stop event.
func SpliceStream(api API, first, cont []byte) ([]byte, error) {
	fe, err := readEvents(first)
	if err != nil {
		return nil, err
	}
	ce, err := readEvents(cont)
	if err != nil {
		return nil, err
	}
	switch api {
	case APIAnthropic:
		return spliceAnthropicStream(first, fe, ce)
	case APIChat:
		return spliceChatStream(first, fe, ce)
	case APIResponses:
		return spliceResponsesStream(first, fe, ce)
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownAPI, string(api))
}

// heldPrefix runs a CallFilter with Hold, refusing nothing, over the first
// n events of stream and returns what the client received, then what came
// after the first held call less the calls (the client gets it with the
// continuation), with the filter.
func heldPrefix(api API, stream []byte, n int) ([]byte, *CallFilter, error) {
	f, err := NewCallFilter(api, func(string) bool { return true }, func(ToolCall) string { return "" })
	if err != nil {
		return nil, nil, err
	}
	f.Hold()
	var out []byte
	i := 0
	err = sse.Each(stream, func(ev *sse.Event) error {
		if i < n {
			out = f.AppendEvent(out, *ev)
		}
		i++
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	f.dropHeld(func(int, *heldCall) bool { return true })
	return f.flushPassed(out), f, nil
}

// appendCont appends an event of the continuation as it came, less a byte
// order mark: it is not the first thing in the stream.
func appendCont(dst []byte, e *streamEvent) []byte {
	return append(dst, sse.TrimBOM(e.raw)...)
}

// anthropicStopAt is the position of the message_delta carrying the stop.
func anthropicStopAt(evs []streamEvent) int {
	for i := range evs {
		if js, ok, _ := evs[i].jsonEvent(APIAnthropic); ok && gjson.Get(js, "type").Str == "message_delta" &&
			gjson.Get(js, "delta.stop_reason").Type == gjson.String {
			return i
		}
	}
	return -1
}

// keptBlocks counts the blocks of a Message the client gets with its
// client calls left out.
func (m *anthropicMessage) keptBlocks() int {
	n := 0
	for _, b := range m.blocks {
		if gjson.Get(b.start, "type").Str != "tool_use" {
			n++
		}
	}
	return n
}

func spliceAnthropicStream(first []byte, fe, ce []streamEvent) ([]byte, error) {
	fm, err := readAnthropicMessage(fe)
	if err != nil {
		return nil, err
	}
	cm, err := readAnthropicMessage(ce)
	if err != nil {
		return nil, err
	}
	out, _, err := heldPrefix(APIAnthropic, first, anthropicStopAt(fe))
	if err != nil {
		return nil, err
	}
	shift := fm.keptBlocks()
	usage := sumUsage(fm.usageJSON(), cm.usageJSON())
	for i := range ce {
		e := &ce[i]
		js, ok, _ := e.jsonEvent(APIAnthropic)
		if !ok {
			out = appendCont(out, e)
			continue
		}
		switch gjson.Get(js, "type").Str {
		case "message_start":
		case "content_block_start", "content_block_delta", "content_block_stop":
			idx := gjson.Get(js, "index")
			if idx.Type != gjson.Number {
				out = appendCont(out, e)
				continue
			}
			out = sse.AppendFrame(out, e.name, renumber(nil, js, "index", int(idx.Int())+shift, 0, false))
		case "message_delta":
			out = sse.AppendFrame(out, e.name, jsonscan.SetMembers(nil, js, jsonscan.Set{Key: "usage", Val: usage}))
		default:
			out = appendCont(out, e)
		}
	}
	return out, nil
}

// chatStop is the position of the first chunk carrying a finish_reason.
func chatStop(evs []streamEvent) int {
	for i := range evs {
		js, ok, _ := evs[i].jsonEvent(APIChat)
		if !ok {
			continue
		}
		for _, ch := range gjson.Get(js, "choices").Array() {
			if ch.Get("finish_reason").Type == gjson.String {
				return i
			}
		}
	}
	return -1
}

// chatStreamUsage is the last usage object of a Chat stream, "" when none.
func chatStreamUsage(evs []streamEvent) string {
	usage := ""
	for i := range evs {
		if js, ok, _ := evs[i].jsonEvent(APIChat); ok {
			if u := gjson.Get(js, "usage"); u.IsObject() {
				usage = u.Raw
			}
		}
	}
	return usage
}

// chatStartChunk reports whether a chunk only opens the reply: a role and
// empty content, nothing else.
func chatStartChunk(js string) bool {
	chs := gjson.Get(js, "choices").Array()
	if len(chs) == 0 || gjson.Get(js, "usage").IsObject() {
		return false
	}
	for _, ch := range chs {
		if ch.Get("finish_reason").Type == gjson.String {
			return false
		}
		empty := true
		ch.Get("delta").ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "role":
			default:
				empty = v.Type == gjson.Null || v.Type == gjson.String && v.Str == ""
			}
			return empty
		})
		if !empty {
			return false
		}
	}
	return true
}

func spliceChatStream(first []byte, fe, ce []streamEvent) ([]byte, error) {
	stop := chatStop(fe)
	if stop < 0 || chatStop(ce) < 0 {
		return nil, ErrIncompleteStream
	}
	for i := range ce {
		if js, ok, err := ce[i].jsonEvent(APIChat); err == nil && ok && gjson.Get(js, "error").Exists() {
			return nil, fmt.Errorf("%w: the continuation carries an error", ErrIncompleteStream)
		}
	}
	out, _, err := heldPrefix(APIChat, first, stop)
	if err != nil {
		return nil, err
	}
	var ids []jsonscan.Set // first's id, created, model
	for i := 0; i < len(fe) && len(ids) == 0; i++ {
		if js, ok, _ := fe[i].jsonEvent(APIChat); ok && gjson.Get(js, "id").Str != "" {
			for _, k := range []string{"id", "created", "model"} {
				if v := gjson.Get(js, k); v.Exists() {
					ids = append(ids, jsonscan.Set{Key: k, Val: v.Raw})
				}
			}
		}
	}
	firstUsage, contUsage := chatStreamUsage(fe), chatStreamUsage(ce)
	usage := sumUsage(firstUsage, contUsage)
	started := false
	for i := range ce {
		e := &ce[i]
		if !e.hasData {
			out = appendCont(out, e)
			continue
		}
		if strings.TrimSpace(e.data) == "[DONE]" {
			continue
		}
		js, _, err := e.jsonEvent(APIChat)
		if err != nil {
			return nil, err
		}
		if !started && chatStartChunk(js) {
			started = true
			continue
		}
		started = true
		set := ids
		if gjson.Get(js, "usage").IsObject() {
			set = append(set[:len(set):len(set)], jsonscan.Set{Key: "usage", Val: usage})
		}
		out = sse.AppendFrame(out, e.name, jsonscan.SetMembers(nil, js, set...))
	}
	if contUsage == "" && firstUsage != "" {
		chunk := jsonscan.SetMembers(nil, `{"object":"chat.completion.chunk","choices":[]}`, append(ids, jsonscan.Set{Key: "usage", Val: usage})...)
		out = sse.AppendFrame(out, "", chunk)
	}
	return sse.AppendFrame(out, "", []byte("[DONE]")), nil
}

// keptOutput is the raw items of a Response's output the client gets with
// its client calls left out.
func keptOutput(resp string) []string {
	var kept []string
	for _, it := range gjson.Get(resp, "output").Array() {
		if ci, call := callitems.Of(it); !call || ci.Hosted {
			kept = append(kept, it.Raw)
		}
	}
	return kept
}

// responsesSplicedResponse is first's Response with cont's output after
// first's kept items, usage summed, and cont's status and details.
func responsesSplicedResponse(fr, cr string) []byte {
	items := keptOutput(fr)
	for _, it := range gjson.Get(cr, "output").Array() {
		items = append(items, it.Raw)
	}
	set := []jsonscan.Set{{Key: "output", Val: "[" + strings.Join(items, ",") + "]"}}
	for _, k := range []string{"status", "incomplete_details", "error", "completed_at"} {
		if v := gjson.Get(cr, k); v.Exists() {
			set = append(set, jsonscan.Set{Key: k, Val: v.Raw})
		}
	}
	fu, cu := gjson.Get(fr, "usage").Raw, gjson.Get(cr, "usage").Raw
	if u := sumUsage(fu, cu); jsonscan.IsObject(u) {
		set = append(set, jsonscan.Set{Key: "usage", Val: u})
	}
	return jsonscan.SetMembers(nil, fr, set...)
}

func spliceResponsesStream(first []byte, fe, ce []streamEvent) ([]byte, error) {
	fr, stop, err := responsesTerminal(fe)
	if err != nil {
		return nil, err
	}
	cr, _, err := responsesTerminal(ce)
	if err != nil {
		return nil, err
	}
	out, f, err := heldPrefix(APIResponses, first, stop)
	if err != nil {
		return nil, err
	}
	shift := len(keptOutput(fr))
	var seq int64
	if f.responses.seqOut {
		seq = f.responses.lastSeq + 1
	}
	for i := range ce {
		e := &ce[i]
		js, ok, _ := e.jsonEvent(APIResponses)
		if !ok {
			out = appendCont(out, e)
			continue
		}
		typ := gjson.Get(js, "type").Str
		switch typ {
		case "response.created", "response.in_progress", "response.queued":
			continue
		}
		_, numbered := sequenceNumber(gjson.Get(js, "sequence_number").Raw)
		pos := -1
		if oi := gjson.Get(js, "output_index"); oi.Type == gjson.Number {
			pos = int(oi.Int()) + shift
		}
		data := renumber(nil, js, "output_index", pos, seq, numbered)
		if numbered {
			seq++
		}
		switch typ {
		case "response.completed", "response.incomplete", "response.failed":
			data = jsonscan.SetMembers(nil, string(data), jsonscan.Set{Key: "response", Val: string(responsesSplicedResponse(fr, cr))})
		}
		out = sse.AppendFrame(out, e.name, data)
	}
	return out, nil
}

// SpliceJSON does what SpliceStream does for non-streamed bodies: first's
// body (its id, model and everything else), its content without client
// tool calls followed by cont's (Anthropic content blocks, Chat message
// content and refusal text, Responses output items), cont's stop and tool
// calls, usage summed.
func SpliceJSON(api API, first, cont []byte) ([]byte, error) {
	fs, err := ReplyObject(api, first)
	if err != nil {
		return nil, err
	}
	cs, err := ReplyObject(api, cont)
	if err != nil {
		return nil, err
	}
	switch api {
	case APIAnthropic:
		var blocks []string
		for _, b := range gjson.Get(fs, "content").Array() {
			if b.Get("type").Str != "tool_use" {
				blocks = append(blocks, b.Raw)
			}
		}
		for _, b := range gjson.Get(cs, "content").Array() {
			blocks = append(blocks, b.Raw)
		}
		set := []jsonscan.Set{{Key: "content", Val: "[" + strings.Join(blocks, ",") + "]"}}
		for _, k := range []string{"stop_reason", "stop_sequence", "stop_details"} {
			set = append(set, jsonscan.Set{Key: k, Val: gjson.Get(cs, k).Raw})
		}
		set = append(set, jsonscan.Set{Key: "usage", Val: sumUsage(gjson.Get(fs, "usage").Raw, gjson.Get(cs, "usage").Raw)})
		return jsonscan.SetMembers(nil, fs, set...), nil
	case APIChat:
		return spliceChatJSON(fs, cs), nil
	case APIResponses:
		return responsesSplicedResponse(fs, cs), nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownAPI, string(api))
}

func spliceChatJSON(fs, cs string) []byte {
	contChoices := gjson.Get(cs, "choices").Array()
	var choices []string
	for _, fc := range gjson.Get(fs, "choices").Array() {
		var cc gjson.Result
		for _, c := range contChoices {
			if c.Get("index").Int() == fc.Get("index").Int() {
				cc = c
			}
		}
		if !cc.Exists() {
			choices = append(choices, fc.Raw)
			continue
		}
		fm, cm := fc.Get("message"), cc.Get("message")
		set := []jsonscan.Set{
			{Key: "content", Val: joinText(fm.Get("content"), cm.Get("content"))},
			{Key: "refusal", Val: joinText(fm.Get("refusal"), cm.Get("refusal"))},
			{Key: "reasoning_content", Val: joinText(fm.Get("reasoning_content"), cm.Get("reasoning_content"))},
			{Key: "tool_calls", Val: cm.Get("tool_calls").Raw},
			{Key: "function_call", Val: cm.Get("function_call").Raw},
		}
		msg := fm.Raw
		if !fm.IsObject() {
			msg = `{"role":"assistant"}`
		}
		choice := jsonscan.SetMembers(nil, fc.Raw, jsonscan.Set{Key: "message", Val: string(jsonscan.SetMembers(nil, msg, set...))},
			jsonscan.Set{Key: "finish_reason", Val: cc.Get("finish_reason").Raw})
		choices = append(choices, string(choice))
	}
	set := []jsonscan.Set{{Key: "choices", Val: "[" + strings.Join(choices, ",") + "]"}}
	if u := sumUsage(gjson.Get(fs, "usage").Raw, gjson.Get(cs, "usage").Raw); jsonscan.IsObject(u) {
		set = append(set, jsonscan.Set{Key: "usage", Val: u})
	}
	return jsonscan.SetMembers(nil, fs, set...)
}

// joinText joins two message texts: null when both are absent or null.
func joinText(a, b gjson.Result) string {
	if a.Type != gjson.String && b.Type != gjson.String {
		if b.Exists() {
			return b.Raw
		}
		return a.Raw
	}
	return jsonscan.Quote(a.Str + b.Str)
}
