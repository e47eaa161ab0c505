package streaming

import (
	"bytes"
	"slices"
	"strings"

	"gatekeeper/streaming/sse"

	"github.com/tidwall/gjson"
)

// The OpenAI Responses decoder. Every event names its type twice (the SSE
// event line and the JSON "type"); the JSON wins, since reframed or proxied
// streams may lose the event line. Recordings with and without
// sequence_number exist, so nothing here depends on it.

var _ Decoder = (*responsesDecoder)(nil)

// responsesCall locates a tool call by what its events reference: deltas
// name the output item id, and fall back to the output index.
type responsesCall struct {
	itemID      string
	outputIndex int
	at          int // position in Result.ToolCalls
}

type responsesDecoder struct {
	res      Result
	started  bool // PartMessageStart sent
	toolUse  bool // a client call item was seen
	terminal bool // response.completed, .incomplete or .failed arrived
	errored  bool // an error event arrived
	finished bool // Finish ran
	calls    []responsesCall
	errCodes []string // codes of error events, so response.failed does not report them twice
	part     Part
	text     []byte
}

func newResponsesDecoder() *responsesDecoder {
	return &responsesDecoder{res: Result{API: APIResponses}}
}

// Result is the reply so far.
func (d *responsesDecoder) Result() *Result { return &d.res }

// Finish marks the reply truncated when no terminal event and no error
// event came. A reply that ended on an error event with no terminal event
// after it stops as an error.
func (d *responsesDecoder) Finish() *Result {
	if d.finished {
		return &d.res
	}
	d.finished = true
	d.res.Truncated = !d.terminal && !d.errored
	if d.errored && len(d.res.Stops) == 0 {
		d.res.Stops = append(d.res.Stops, Stop{Reason: StopError, Raw: "error"})
	}
	return &d.res
}

// responsesEvent holds the top-level fields of one event that any handler
// reads, gathered in one pass over the JSON.
type responsesEvent struct {
	typ, response, item, outputIndex, itemID gjson.Result
	delta, arguments, input, name, err       gjson.Result
}

// Decode handles one SSE event of a Responses stream.
func (d *responsesDecoder) Decode(ev *sse.Event, emit func(*Part)) {
	if !ev.HasData {
		return
	}
	data := bytes.TrimSpace(ev.Data)
	if len(data) == 0 || bytes.HasPrefix(data, []byte(doneMarker)) {
		// Not part of this API; some compatible servers end with [DONE]
		// anyway, and it carries nothing.
		return
	}
	root, err := openaiObject(data, "responses event")
	if err != nil {
		if string(ev.Name) == "error" {
			// An error event whose data is plain text is still the error.
			d.errored = true
			d.addError(openaiProviderError(openaiText(data)), emit)
			return
		}
		d.res.unparsed(err)
		return
	}
	var f responsesEvent
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			f.typ = v
		case "response":
			f.response = v
		case "item":
			f.item = v
		case "output_index":
			f.outputIndex = v
		case "item_id":
			f.itemID = v
		case "delta":
			f.delta = v
		case "arguments":
			f.arguments = v
		case "input":
			f.input = v
		case "name":
			f.name = v
		case "error":
			f.err = v
		}
		return true
	})
	typ := f.typ.Str
	if f.typ.Type != gjson.String {
		typ = string(ev.Name)
	}
	switch typ {
	case "response.created", "response.in_progress", "response.queued":
		d.lifecycle(f.response, emit)
	case "response.output_item.added":
		if f.item.IsObject() {
			d.itemAdded(f.outputIndex, f.item, emit)
		}
	case "response.output_item.done":
		if f.item.IsObject() {
			d.itemDone(int(f.outputIndex.Int()), f.item, emit)
		}
	case "response.function_call_arguments.delta":
		d.argsDelta("function_call", f, emit)
	case "response.custom_tool_call_input.delta":
		d.argsDelta("custom_tool_call", f, emit)
	case "response.mcp_call_arguments.delta":
		d.argsDelta("mcp_call", f, emit)
	case "response.function_call_arguments.done":
		d.argsDone("function_call", f, f.arguments, emit)
	case "response.custom_tool_call_input.done":
		d.argsDone("custom_tool_call", f, f.input, emit)
	case "response.mcp_call_arguments.done":
		d.argsDone("mcp_call", f, f.arguments, emit)
	case "response.output_text.delta":
		d.textDelta(PartTextDelta, f, emit)
	case "response.refusal.delta":
		d.textDelta(PartRefusalDelta, f, emit)
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		d.textDelta(PartThinkingDelta, f, emit)
	case "response.completed", "response.incomplete", "response.failed":
		if f.response.IsObject() {
			d.terminalEvent(typ, f.response, emit)
		}
	case "error":
		d.errorEvent(root, f.err, emit)
	}
}

// lifecycle takes the id and model from a Response object.
func (d *responsesDecoder) lifecycle(resp gjson.Result, emit func(*Part)) {
	if !resp.IsObject() {
		return
	}
	if d.res.MessageID == "" {
		if id := resp.Get("id"); id.Type == gjson.String {
			d.res.MessageID = strings.Clone(id.Str)
		}
	}
	if d.res.Model == "" {
		if m := resp.Get("model"); m.Type == gjson.String {
			d.res.Model = strings.Clone(m.Str)
		}
	}
	if !d.started && d.res.MessageID != "" {
		d.started = true
		d.send(emit, Part{Kind: PartMessageStart, ID: d.res.MessageID, Model: d.res.Model})
	}
}

func (d *responsesDecoder) itemAdded(outputIndex gjson.Result, item gjson.Result, emit func(*Part)) {
	ci, ok := callItemOf(item)
	if !ok {
		return
	}
	id := item.Get("id").Str
	if at := d.find(id, outputIndex); at >= 0 && d.calls[at].itemID == id {
		// Announced twice, or after its first delta: only fill what is missing.
		d.fill(at, ci, item)
		return
	}
	at := d.open(ci, int(outputIndex.Int()), id, item.Get("call_id").String(), ci.callName(item.Get("name").Raw), emit)
	d.appendArgs(at, ci.inputOf(item), emit)
}

// itemDone completes a call from its finished item, unless its arguments
// .done event already did.
func (d *responsesDecoder) itemDone(outputIndex int, item gjson.Result, emit func(*Part)) {
	ci, ok := callItemOf(item)
	if !ok {
		return
	}
	if status := item.Get("status"); status.Exists() && status.Str != "completed" {
		return // an item cut short (incomplete response): its arguments are not whole
	}
	id := item.Get("id").Str
	at := d.findItem(id, outputIndex)
	if at < 0 {
		at = d.open(ci, outputIndex, id, item.Get("call_id").String(), ci.callName(item.Get("name").Raw), emit)
	}
	d.fill(at, ci, item)
	tc := &d.res.ToolCalls[d.calls[at].at]
	if tc.Complete {
		return
	}
	switch args := ci.inputOf(item); {
	case (args.IsObject() || args.IsArray()) && len(tc.Arguments) == 0:
		// An action or operation comes whole, never in deltas: it is the
		// call's one fragment.
		d.appendFragment(at, args.Raw, emit)
	case args.Exists():
		tc.Arguments = appendArgsValue(tc.Arguments[:0], args)
	}
	d.complete(at, emit)
}

// fill takes a call's call_id and name from its item when they are missing.
func (d *responsesDecoder) fill(at int, ci responsesItem, item gjson.Result) {
	tc := &d.res.ToolCalls[d.calls[at].at]
	if tc.ID == "" {
		tc.ID = strings.Clone(item.Get("call_id").String())
	}
	if tc.Name == "" {
		tc.Name = strings.Clone(ci.callName(item.Get("name").Raw))
	}
}

func (d *responsesDecoder) argsDelta(typ string, f responsesEvent, emit func(*Part)) {
	at := d.find(f.itemID.Str, f.outputIndex)
	if at < 0 {
		ci, _ := lookupCallItem(typ, false)
		at = d.open(ci, int(f.outputIndex.Int()), f.itemID.Str, "", "", emit)
	}
	d.appendArgs(at, f.delta, emit)
}

// argsDone trusts the event's full arguments over the accumulated deltas.
// Its name may be missing (2025-05 recordings); the added item had it.
func (d *responsesDecoder) argsDone(typ string, f responsesEvent, final gjson.Result, emit func(*Part)) {
	at := d.find(f.itemID.Str, f.outputIndex)
	if at < 0 {
		ci, _ := lookupCallItem(typ, false)
		at = d.open(ci, int(f.outputIndex.Int()), f.itemID.Str, "", "", emit)
	}
	tc := &d.res.ToolCalls[d.calls[at].at]
	if tc.Name == "" && f.name.Type == gjson.String {
		tc.Name = strings.Clone(f.name.Str)
	}
	if tc.Complete {
		return
	}
	if final.Exists() {
		tc.Arguments = appendArgsValue(tc.Arguments[:0], final)
	}
	d.complete(at, emit)
}

// find locates a call by item id, falling back to the output index.
func (d *responsesDecoder) find(itemID string, outputIndex gjson.Result) int {
	if itemID != "" {
		for i := len(d.calls) - 1; i >= 0; i-- {
			if d.calls[i].itemID == itemID {
				return i
			}
		}
	}
	if outputIndex.Type == gjson.Number {
		oi := int(outputIndex.Int())
		for i := len(d.calls) - 1; i >= 0; i-- {
			if d.calls[i].outputIndex == oi {
				return i
			}
		}
	}
	return -1
}

func (d *responsesDecoder) findItem(itemID string, outputIndex int) int {
	return d.find(itemID, gjson.Result{Type: gjson.Number, Num: float64(outputIndex)})
}

// open starts a call of the item type ci; a call of a known type keeps the
// table's type string, an unknown one a copy.
func (d *responsesDecoder) open(ci responsesItem, outputIndex int, itemID, callID, name string, emit func(*Part)) int {
	typ, server := ci.typ, ci.hosted
	if ci.unknown {
		typ = strings.Clone(typ)
	}
	at := len(d.res.ToolCalls)
	d.res.ToolCalls = append(d.res.ToolCalls, ToolCall{
		Index: outputIndex, Type: typ, ID: strings.Clone(callID), ItemID: strings.Clone(itemID),
		Name: strings.Clone(name), Server: server,
	})
	d.calls = append(d.calls, responsesCall{itemID: d.res.ToolCalls[at].ItemID, outputIndex: outputIndex, at: at})
	if !server {
		d.toolUse = true
		tc := &d.res.ToolCalls[at]
		d.send(emit, Part{Kind: PartToolCallStart, Index: outputIndex, ID: tc.ID, ItemID: tc.ItemID, Name: tc.Name, Type: typ})
	}
	return len(d.calls) - 1
}

func (d *responsesDecoder) appendArgs(at int, v gjson.Result, emit func(*Part)) {
	if v.Type != gjson.String {
		return
	}
	d.appendFragment(at, v.Str, emit)
}

// appendFragment adds text to a call's arguments.
func (d *responsesDecoder) appendFragment(at int, text string, emit func(*Part)) {
	if text == "" {
		return
	}
	tc := &d.res.ToolCalls[d.calls[at].at]
	tc.Arguments = append(tc.Arguments, text...)
	d.res.OutputBytes += int64(len(text))
	if tc.Server || emit == nil {
		return
	}
	d.text = append(d.text[:0], text...)
	d.send(emit, Part{Kind: PartToolCallArgs, Index: tc.Index, ID: tc.ID, ItemID: tc.ItemID, Text: d.text})
}

// appendArgsValue appends a final arguments value: a string for function
// and custom tools; an object is kept as its JSON.
func appendArgsValue(dst []byte, v gjson.Result) []byte {
	if v.Type == gjson.String {
		return append(dst, v.Str...)
	}
	if v.IsObject() || v.IsArray() {
		return append(dst, v.Raw...)
	}
	return dst
}

func (d *responsesDecoder) complete(at int, emit func(*Part)) {
	tc := &d.res.ToolCalls[d.calls[at].at]
	tc.Complete = true
	if tc.Server {
		return
	}
	d.send(emit, Part{
		Kind: PartToolCallEnd, Index: tc.Index, ID: tc.ID, ItemID: tc.ItemID, Name: tc.Name, Type: tc.Type,
		Text: tc.Arguments[:len(tc.Arguments):len(tc.Arguments)],
	})
}

func (d *responsesDecoder) textDelta(kind PartKind, f responsesEvent, emit func(*Part)) {
	if f.delta.Type != gjson.String || f.delta.Str == "" {
		return
	}
	d.res.OutputBytes += int64(len(f.delta.Str))
	if kind != PartThinkingDelta {
		d.res.TextBytes += int64(len(f.delta.Str))
	}
	if emit == nil {
		return
	}
	d.text = append(d.text[:0], f.delta.Str...)
	d.send(emit, Part{Kind: kind, Index: int(f.outputIndex.Int()), Text: d.text})
}

// terminalEvent ends the reply: kind is the event type, resp the final
// Response object. Only the first terminal event counts.
func (d *responsesDecoder) terminalEvent(kind string, resp gjson.Result, emit func(*Part)) {
	if d.terminal {
		return
	}
	d.terminal = true
	d.lifecycle(resp, emit)
	d.outputDone(resp, emit)
	var stop Stop
	switch kind {
	case "response.completed":
		stop = Stop{Reason: StopEndTurn, Raw: "response.completed"}
		if d.toolUse {
			stop.Reason = StopToolUse
		}
	case "response.incomplete":
		reason := resp.Get("incomplete_details.reason").String()
		stop = Stop{Reason: responsesIncompleteReason(reason), Raw: "response.incomplete"}
		if reason != "" {
			stop.Raw += ":" + reason
		}
	case "response.failed":
		stop = Stop{Reason: StopError, Raw: "response.failed"}
		if e := resp.Get("error"); e.IsObject() {
			code := e.Get("code").String()
			if code == "" || !slices.Contains(d.errCodes, code) {
				d.providerError(e, code, emit)
			}
		}
	default:
		// Non-streaming bodies only: cancelled and other final statuses.
		status := strings.TrimPrefix(kind, "response.")
		stop = Stop{Reason: StopReason(status), Raw: kind}
	}
	d.usage(resp, emit)
	d.res.Stops = append(d.res.Stops, stop)
	d.send(emit, Part{Kind: PartStop, Stop: stop})
	d.res.Done = true
	d.send(emit, Part{Kind: PartDone})
}

// outputDone completes the calls of a Response's output array. The final
// output is authoritative for calls whose end events were lost (or never
// streamed, in a non-streaming body).
func (d *responsesDecoder) outputDone(resp gjson.Result, emit func(*Part)) {
	out := resp.Get("output")
	if !out.IsArray() {
		return
	}
	out.ForEach(func(i, item gjson.Result) bool {
		if item.IsObject() {
			d.itemDone(int(i.Int()), item, emit)
		}
		return true
	})
}

// usage takes a Response's usage report, when it has one.
func (d *responsesDecoder) usage(resp gjson.Result, emit func(*Part)) {
	if u := resp.Get("usage"); u.IsObject() {
		d.res.Usage = responsesUsage(u)
		d.res.UsageSeen, d.res.UsageFinal = true, true
		d.send(emit, Part{Kind: PartUsage, Usage: d.res.Usage})
	}
}

func responsesIncompleteReason(reason string) StopReason {
	switch reason {
	case "max_output_tokens":
		return StopMaxTokens
	case "content_filter":
		return StopContentFilter
	case "":
		return StopReason("incomplete")
	}
	return StopReason(strings.Clone(reason))
}

// errorEvent handles both shapes of the error event: the nested one seen
// on the wire ({"type":"error","error":{...}}) and the SDK's flat one
// ({"type":"error","code","message","param"}).
func (d *responsesDecoder) errorEvent(root, nested gjson.Result, emit func(*Part)) {
	d.errored = true
	if nested.IsObject() {
		code := nested.Get("code").String()
		if code == "" {
			code = nested.Get("type").String()
		}
		d.errCodes = append(d.errCodes, strings.Clone(code))
		pe := openaiProviderError(nested)
		d.addError(pe, emit)
		return
	}
	code := root.Get("code").String()
	d.errCodes = append(d.errCodes, strings.Clone(code))
	pe := ProviderError{Type: strings.Clone(code), Message: strings.Clone(root.Get("message").String()), Raw: []byte(root.Raw)}
	if pe.Type == "" {
		pe.Type = "error"
	}
	d.addError(pe, emit)
}

// providerError reports a failed response's error object, keyed by code.
func (d *responsesDecoder) providerError(e gjson.Result, code string, emit func(*Part)) {
	pe := openaiProviderError(e)
	if code != "" {
		pe.Type = strings.Clone(code)
	}
	d.addError(pe, emit)
}

func (d *responsesDecoder) addError(pe ProviderError, emit func(*Part)) {
	d.res.Errors = append(d.res.Errors, pe)
	d.send(emit, Part{Kind: PartError, Err: &pe})
}

func (d *responsesDecoder) send(emit func(*Part), p Part) {
	if emit == nil {
		return
	}
	d.part = p
	emit(&d.part)
}

// responsesUsage normalizes a ResponseUsage object. An
// all-zero report is a real zero.
func responsesUsage(u gjson.Result) Usage {
	in := nonNegative(u.Get("input_tokens").Int())
	cached := nonNegative(u.Get("input_tokens_details.cached_tokens").Int())
	write := nonNegative(u.Get("input_tokens_details.cache_write_tokens").Int())
	return Usage{
		InputTokens:       nonNegative(in - cached - write),
		CachedInputTokens: cached,
		CacheWriteTokens:  write,
		OutputTokens:      nonNegative(u.Get("output_tokens").Int()),
		ReasoningTokens:   nonNegative(u.Get("output_tokens_details.reasoning_tokens").Int()),
	}
}

// decodeResponsesJSON decodes a non-streaming Response body (or an error
// body) into the Result its stream would give.
func decodeResponsesJSON(body []byte) (*Result, error) {
	root, err := openaiObject(bytes.TrimSpace(body), "response")
	if err != nil {
		return nil, err
	}
	d := newResponsesDecoder()
	status := root.Get("status")
	if e := root.Get("error"); e.IsObject() && !status.Exists() {
		// An error body: {"error":{"message","type","param","code"}}.
		d.addError(openaiProviderError(e), nil)
		d.res.Stops = append(d.res.Stops, Stop{Reason: StopError, Raw: "error"})
		d.res.Done = true
		d.terminal = true
		return d.Finish(), nil
	}
	d.lifecycle(root, nil)
	d.res.OutputBytes, d.res.TextBytes = responsesOutputBytes(root.Get("output"))
	switch status.Str {
	case "in_progress", "queued", "":
		// A background response not finished yet: its items so far, no stop.
		d.terminal = true
		d.outputDone(root, nil)
		d.usage(root, nil)
		d.res.Done = true
	default:
		d.terminalEvent("response."+status.Str, root, nil)
	}
	return d.Finish(), nil
}

// responsesOutputBytes counts the output and the text (messages alone) a
// whole response carries, as the stream's deltas would have.
func responsesOutputBytes(output gjson.Result) (n, text int64) {
	output.ForEach(func(_, item gjson.Result) bool {
		switch item.Get("type").Str {
		case "message":
			item.Get("content").ForEach(func(_, c gjson.Result) bool {
				m := int64(len(c.Get("text").Str) + len(c.Get("refusal").Str))
				n += m
				text += m
				return true
			})
		case "reasoning":
			for _, key := range [...]string{"summary", "content"} {
				item.Get(key).ForEach(func(_, c gjson.Result) bool {
					n += int64(len(c.Get("text").Str))
					return true
				})
			}
		default:
			// An action or operation object is counted as the call
			// completes (itemDone), as in a stream.
			if ci, ok := callItemOf(item); ok {
				n += int64(len(ci.inputOf(item).Str))
			}
		}
		return true
	})
	return n, text
}
