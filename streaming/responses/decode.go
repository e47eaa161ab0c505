package responses

import (
	"bytes"
	"slices"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/callitems"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/openai"
	"gatekeeper/streaming/sse"
)

// The OpenAI Responses decoder. Every event names its type twice (the SSE
// event line and the JSON "type"); the JSON wins, since reframed or proxied
// streams may lose the event line. Recordings with and without
// sequence_number exist, so nothing here depends on it.

var _ streaming.Decoder = (*decoder)(nil)

// responsesCall locates a tool call by what its events reference: deltas
// name the output item id, and fall back to the output index.
type responsesCall struct {
	itemID      string
	outputIndex int
}

type decoder struct {
	res      streaming.Result
	toolUse  bool            // a client call item was seen
	terminal bool            // response.completed, .incomplete or .failed arrived
	errored  bool            // an error event arrived
	finished bool            // Finish ran
	calls    []responsesCall // where each of Result.ToolCalls is
	errCodes []string        // codes of error events, so response.failed does not report them twice
	scratch  []byte          // a delta decoded, to count its bytes
}

func newDecoder() *decoder {
	return &decoder{res: streaming.Result{API: streaming.APIResponses}}
}

// Result is the reply so far.
func (d *decoder) Result() *streaming.Result { return &d.res }

// Finish marks the reply truncated when no terminal event and no error
// event came. A reply that ended on an error event with no terminal event
// after it stops as an error.
func (d *decoder) Finish() *streaming.Result {
	if d.finished {
		return &d.res
	}
	d.finished = true
	d.res.Truncated = !d.terminal && !d.errored
	if d.errored && len(d.res.Stops) == 0 {
		d.res.Stops = append(d.res.Stops, streaming.Stop{Reason: streaming.StopError, Raw: "error"})
	}
	return &d.res
}

// eventFields are the top-level members of an event that the decoder or
// the call filter reads, raw, gathered in one walk: the last of duplicate
// members wins, as in gjson's ForEach, and no value is unescaped until it
// is used.
type eventFields struct {
	typ, response, item, outputIndex, itemID, name, seq string
	delta, arguments, input, err                        string
}

func readEvent(js string) (e eventFields) {
	for m, next, ok := jsonscan.NextMember(js, jsonscan.ObjectStart(js)); ok; m, next, ok = jsonscan.NextMember(js, next) {
		switch m.Name() {
		case "type":
			e.typ = m.Val
		case "response":
			e.response = m.Val
		case "item":
			e.item = m.Val
		case "output_index":
			e.outputIndex = m.Val
		case "item_id":
			e.itemID = m.Val
		case "name":
			e.name = m.Val
		case "sequence_number":
			e.seq = m.Val
		case "delta":
			e.delta = m.Val
		case "arguments":
			e.arguments = m.Val
		case "input":
			e.input = m.Val
		case "error":
			e.err = m.Val
		}
	}
	return e
}

// responsesEvent holds the members of one event that the decoder's
// handlers read, parsed.
type responsesEvent struct {
	typ, response, item, outputIndex, itemID gjson.Result
	arguments, input, name, err              gjson.Result
	// delta is kept as its raw JSON value and decoded only where it is
	// used: an arguments fragment straight into the call's buffer.
	delta string
}

// Decode handles one SSE event of a Responses stream.
func (d *decoder) Decode(ev *sse.Event) {
	data, done := openai.Data(ev)
	if len(data) == 0 || done {
		// Not part of this API; some compatible servers end with [DONE]
		// anyway, and it carries nothing.
		return
	}
	d.res.Ambiguous = d.res.Ambiguous || ev.JSON == sse.JSONRepeated
	root, err := openai.EventObject(ev, data, "responses event")
	if err != nil {
		if string(ev.Name) == "error" {
			// An error event whose data is plain text is still the error.
			d.errored = true
			d.addError(openai.ProviderError(openai.Text(data)))
			return
		}
		d.res.AddUnparsed(err)
		return
	}
	r := readEvent(root.Raw)
	f := responsesEvent{
		typ: gjson.Parse(r.typ), response: gjson.Parse(r.response), item: gjson.Parse(r.item),
		outputIndex: gjson.Parse(r.outputIndex), itemID: gjson.Parse(r.itemID), arguments: gjson.Parse(r.arguments),
		input: gjson.Parse(r.input), name: gjson.Parse(r.name), err: gjson.Parse(r.err), delta: r.delta,
	}
	typ := f.typ.Str
	if f.typ.Type != gjson.String {
		typ = string(ev.Name)
	}
	switch typ {
	case "response.created", "response.in_progress", "response.queued":
		d.lifecycle(f.response)
	case "response.output_item.added":
		if f.item.IsObject() {
			d.itemAdded(f.outputIndex, f.item)
		}
	case "response.output_item.done":
		if f.item.IsObject() {
			d.itemDone(int(f.outputIndex.Int()), f.item)
		}
	case "response.function_call_arguments.delta":
		d.appendArgsRaw(d.argsCall("function_call", f), f.delta)
	case "response.custom_tool_call_input.delta":
		d.appendArgsRaw(d.argsCall("custom_tool_call", f), f.delta)
	case "response.mcp_call_arguments.delta":
		d.appendArgsRaw(d.argsCall("mcp_call", f), f.delta)
	case "response.function_call_arguments.done":
		d.argsDone("function_call", f, f.arguments)
	case "response.custom_tool_call_input.done":
		d.argsDone("custom_tool_call", f, f.input)
	case "response.mcp_call_arguments.done":
		d.argsDone("mcp_call", f, f.arguments)
	case "response.output_text.delta", "response.refusal.delta":
		openai.CountText(&d.res, openai.Said, int64(d.decodedLen(f.delta)))
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		openai.CountText(&d.res, openai.Thought, int64(d.decodedLen(f.delta)))
	case "response.completed", "response.incomplete", "response.failed":
		if f.response.IsObject() {
			d.terminalEvent(typ, f.response)
		}
	case "error":
		d.errorEvent(root, f.err)
	}
}

// lifecycle takes the id and model from a Response object.
func (d *decoder) lifecycle(resp gjson.Result) {
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
}

func (d *decoder) itemAdded(outputIndex gjson.Result, item gjson.Result) {
	ci, ok := callitems.Of(item)
	if !ok {
		return
	}
	id := item.Get("id").Str
	if at := d.find(id, outputIndex); at >= 0 && d.calls[at].itemID == id {
		// Announced twice, or after its first delta: only fill what is missing.
		d.fill(at, ci, item)
		return
	}
	at := d.open(ci, int(outputIndex.Int()), id, item.Get("call_id").String(), ci.CallName(item.Get("name").Raw))
	d.appendArgs(at, ci.InputOf(item))
}

// itemDone completes a call from its finished item, unless its arguments
// .done event already did.
func (d *decoder) itemDone(outputIndex int, item gjson.Result) {
	ci, ok := callitems.Of(item)
	if !ok {
		return
	}
	if unfinished(item) {
		return // an item cut short (incomplete response): its arguments are not whole
	}
	id := item.Get("id").Str
	at := d.findItem(id, outputIndex)
	if at < 0 {
		at = d.open(ci, outputIndex, id, item.Get("call_id").String(), ci.CallName(item.Get("name").Raw))
	}
	d.fill(at, ci, item)
	tc := &d.res.ToolCalls[at]
	if tc.Complete {
		return
	}
	switch args := ci.InputOf(item); {
	case (args.IsObject() || args.IsArray()) && len(tc.Arguments) == 0:
		// An action or operation comes whole, never in deltas: it is the
		// call's one fragment.
		d.appendFragment(at, args.Raw)
	case args.Exists():
		tc.Arguments = appendArgsValue(tc.Arguments[:0], args)
	}
	tc.Complete = true
}

// fill takes a call's call_id and name from its item when they are missing.
func (d *decoder) fill(at int, ci callitems.Item, item gjson.Result) {
	tc := &d.res.ToolCalls[at]
	if tc.ID == "" {
		tc.ID = strings.Clone(item.Get("call_id").String())
	}
	if tc.Name == "" {
		tc.Name = strings.Clone(ci.CallName(item.Get("name").Raw))
	}
}

// argsCall is the call an arguments event of a call of type typ is for,
// opened when it is new.
func (d *decoder) argsCall(typ string, f responsesEvent) int {
	at := d.find(f.itemID.Str, f.outputIndex)
	if at < 0 {
		ci, _ := callitems.Lookup(typ, false)
		at = d.open(ci, int(f.outputIndex.Int()), f.itemID.Str, "", "")
	}
	return at
}

// argsDone trusts the event's full arguments over the accumulated deltas.
// Its name may be missing (2025-05 recordings); the added item had it.
func (d *decoder) argsDone(typ string, f responsesEvent, final gjson.Result) {
	tc := &d.res.ToolCalls[d.argsCall(typ, f)]
	if tc.Name == "" && f.name.Type == gjson.String {
		tc.Name = strings.Clone(f.name.Str)
	}
	if tc.Complete {
		return
	}
	if final.Exists() {
		tc.Arguments = appendArgsValue(tc.Arguments[:0], final)
	}
	tc.Complete = true
}

// find locates a call by item id, falling back to the output index.
func (d *decoder) find(itemID string, outputIndex gjson.Result) int {
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

func (d *decoder) findItem(itemID string, outputIndex int) int {
	return d.find(itemID, gjson.Result{Type: gjson.Number, Num: float64(outputIndex)})
}

// open starts a call of the item type ci; a call of a known type keeps the
// table's type string, an unknown one a copy.
func (d *decoder) open(ci callitems.Item, outputIndex int, itemID, callID, name string) int {
	typ, server := ci.Typ, ci.Hosted
	if ci.Unknown {
		typ = strings.Clone(typ)
	}
	at := len(d.res.ToolCalls)
	d.res.ToolCalls = append(d.res.ToolCalls, streaming.ToolCall{
		Index: outputIndex, Type: typ, ID: strings.Clone(callID), ItemID: strings.Clone(itemID),
		Name: strings.Clone(name), Server: server,
	})
	d.calls = append(d.calls, responsesCall{itemID: d.res.ToolCalls[at].ItemID, outputIndex: outputIndex})
	if !server {
		d.toolUse = true
	}
	return len(d.calls) - 1
}

// appendArgsRaw adds an arguments fragment given as a raw JSON string,
// decoded straight into the call's arguments.
func (d *decoder) appendArgsRaw(at int, raw string) {
	if !jsonscan.IsStringRaw(raw) {
		return
	}
	tc := &d.res.ToolCalls[at]
	n := len(tc.Arguments)
	tc.Arguments = jsonscan.AppendDecoded(tc.Arguments, raw)
	d.res.OutputBytes += int64(len(tc.Arguments) - n)
}

func (d *decoder) appendArgs(at int, v gjson.Result) {
	if v.Type != gjson.String {
		return
	}
	d.appendFragment(at, v.Str)
}

// appendFragment adds text to a call's arguments.
func (d *decoder) appendFragment(at int, text string) {
	if text == "" {
		return
	}
	tc := &d.res.ToolCalls[at]
	tc.Arguments = append(tc.Arguments, text...)
	d.res.OutputBytes += int64(len(text))
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

// decodedLen is the length of the JSON string raw decoded, 0 when raw is
// not a string.
func (d *decoder) decodedLen(raw string) int {
	if !jsonscan.IsStringRaw(raw) {
		return 0
	}
	if strings.IndexByte(raw, '\\') < 0 {
		return len(raw) - 2
	}
	d.scratch = jsonscan.AppendDecoded(d.scratch[:0], raw)
	return len(d.scratch)
}

// terminalEvent ends the reply: kind is the event type, resp the final
// Response object. Only the first terminal event counts.
func (d *decoder) terminalEvent(kind string, resp gjson.Result) {
	if d.terminal {
		return
	}
	d.terminal = true
	d.lifecycle(resp)
	d.outputDone(resp)
	var stop streaming.Stop
	switch kind {
	case "response.completed":
		stop = streaming.Stop{Reason: streaming.StopEndTurn, Raw: "response.completed"}
		if d.toolUse {
			stop.Reason = streaming.StopToolUse
		}
	case "response.incomplete":
		reason := resp.Get("incomplete_details.reason").String()
		stop = streaming.Stop{Reason: responsesIncompleteReason(reason), Raw: "response.incomplete"}
		if reason != "" {
			stop.Raw += ":" + reason
		}
	case "response.failed":
		stop = streaming.Stop{Reason: streaming.StopError, Raw: "response.failed"}
		if e := resp.Get("error"); e.IsObject() {
			code := e.Get("code").String()
			if code == "" || !slices.Contains(d.errCodes, code) {
				d.providerError(e, code)
			}
		}
	default:
		// Non-streaming bodies only: cancelled and other final statuses.
		status := strings.TrimPrefix(kind, "response.")
		stop = streaming.Stop{Reason: streaming.StopReason(status), Raw: kind}
	}
	d.usage(resp)
	d.res.Stops = append(d.res.Stops, stop)
	d.res.Done = true
}

// outputDone completes the calls of a Response's output array. The final
// output is authoritative for calls whose end events were lost (or never
// streamed, in a non-streaming body).
func (d *decoder) outputDone(resp gjson.Result) {
	out := resp.Get("output")
	if !out.IsArray() {
		return
	}
	out.ForEach(func(i, item gjson.Result) bool {
		if item.IsObject() {
			d.itemDone(int(i.Int()), item)
		}
		return true
	})
}

// usage takes a Response's usage report, when it has one.
func (d *decoder) usage(resp gjson.Result) {
	if u := resp.Get("usage"); u.IsObject() {
		d.res.Usage = responsesUsage(u)
		d.res.UsageSeen, d.res.UsageFinal = true, true
	}
}

func responsesIncompleteReason(reason string) streaming.StopReason {
	switch reason {
	case "max_output_tokens":
		return streaming.StopMaxTokens
	case "content_filter":
		return streaming.StopContentFilter
	case "":
		return streaming.StopReason("incomplete")
	}
	return streaming.StopReason(strings.Clone(reason))
}

// errorEvent handles both shapes of the error event: the nested one seen
// on the wire ({"type":"error","error":{...}}) and the SDK's flat one
// ({"type":"error","code","message","param"}).
func (d *decoder) errorEvent(root, nested gjson.Result) {
	d.errored = true
	if nested.IsObject() {
		code := nested.Get("code").String()
		if code == "" {
			code = nested.Get("type").String()
		}
		d.errCodes = append(d.errCodes, strings.Clone(code))
		pe := openai.ProviderError(nested)
		d.addError(pe)
		return
	}
	code := root.Get("code").String()
	d.errCodes = append(d.errCodes, strings.Clone(code))
	pe := streaming.ProviderError{Type: strings.Clone(code), Message: strings.Clone(root.Get("message").String()), Raw: []byte(root.Raw)}
	if pe.Type == "" {
		pe.Type = "error"
	}
	d.addError(pe)
}

// providerError reports a failed response's error object, keyed by code.
func (d *decoder) providerError(e gjson.Result, code string) {
	pe := openai.ProviderError(e)
	if code != "" {
		pe.Type = strings.Clone(code)
	}
	d.addError(pe)
}

func (d *decoder) addError(pe streaming.ProviderError) {
	d.res.Errors = append(d.res.Errors, pe)
}

// responsesUsage normalizes a ResponseUsage object. An
// all-zero report is a real zero.
func responsesUsage(u gjson.Result) streaming.Usage {
	in := openai.NonNegative(u.Get("input_tokens").Int())
	cached := openai.NonNegative(u.Get("input_tokens_details.cached_tokens").Int())
	write := openai.NonNegative(u.Get("input_tokens_details.cache_write_tokens").Int())
	return openai.Usage(in, cached, write, openai.NonNegative(u.Get("output_tokens").Int()),
		openai.NonNegative(u.Get("output_tokens_details.reasoning_tokens").Int()))
}

// decodeJSON decodes a non-streaming Response body (or an error
// body) into the Result its stream would give.
func decodeJSON(body []byte) (*streaming.Result, error) {
	body, repeated := streaming.Unrepeated(body)
	root, err := openai.Object(bytes.TrimSpace(body), "response")
	if err != nil {
		return nil, err
	}
	d := newDecoder()
	d.res.Ambiguous = repeated
	status := root.Get("status")
	if e := root.Get("error"); e.IsObject() && !status.Exists() {
		// An error body: {"error":{"message","type","param","code"}}.
		d.addError(openai.ProviderError(e))
		d.res.Stops = append(d.res.Stops, streaming.Stop{Reason: streaming.StopError, Raw: "error"})
		d.res.Done = true
		d.terminal = true
		return d.Finish(), nil
	}
	d.lifecycle(root)
	d.res.OutputBytes, d.res.TextBytes = responsesOutputBytes(root.Get("output"))
	switch status.Str {
	case "in_progress", "queued", "":
		// A background response not finished yet: its items so far, no stop.
		d.terminal = true
		d.outputDone(root)
		d.usage(root)
		d.res.Done = true
	default:
		d.terminalEvent("response."+status.Str, root)
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
			if ci, ok := callitems.Of(item); ok {
				n += int64(len(ci.InputOf(item).Str))
			}
		}
		return true
	})
	return n, text
}
