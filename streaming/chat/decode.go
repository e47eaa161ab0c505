package chat

import (
	"bytes"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/openai"
	"gatekeeper/streaming/sse"
)

// The OpenAI Chat Completions decoder. One wire format is spoken by OpenAI,
// Azure, DeepSeek, Groq, xAI, OpenRouter and Anthropic's compatible
// endpoint, each with its own quirks; the decoder keys
// everything on what is present rather than on who sent it.

var _ streaming.Decoder = (*decoder)(nil)

type decoder struct {
	res      streaming.Result
	errored  bool      // an error arrived (event: error or an inline error object)
	finished bool      // Finish ran
	calls    []callKey // the key of each of Result.ToolCalls
}

func newDecoder() *decoder {
	return &decoder{res: streaming.Result{API: streaming.APIChat}}
}

// Result is the reply so far.
func (d *decoder) Result() *streaming.Result { return &d.res }

// Finish marks the reply truncated when neither [DONE] nor an error came.
// Tool calls whose choice never finished stay incomplete.
func (d *decoder) Finish() *streaming.Result {
	if !d.finished {
		d.finished = true
		d.res.Truncated = !d.res.Done && !d.errored
	}
	return &d.res
}

// Decode handles one SSE event of a Chat Completions stream. An event the
// stream's end cut off (Unterminated) is decoded like any other: a whole
// JSON object or [DONE] is whole, a cut one fails to parse and is counted.
func (d *decoder) Decode(ev *sse.Event) {
	data, done := openai.Data(ev)
	switch {
	case len(data) == 0:
		return // an empty data field carries nothing to decode
	case done:
		d.res.Done = true
		return
	}
	d.res.Ambiguous = d.res.Ambiguous || ev.JSON == sse.JSONRepeated
	errorEvent := string(ev.Name) == "error"
	root, err := openai.EventObject(ev, data, "chat chunk")
	switch {
	case err == nil:
		d.chunk(root, errorEvent)
	case errorEvent:
		// An error event whose data is plain text is still the error.
		d.providerError(openai.Text(data))
	default:
		d.res.AddUnparsed(err)
	}
}

// chunk handles one chunk object (or one whole chat.completion body, whose
// choices carry "message" where chunks carry "delta").
func (d *decoder) chunk(root gjson.Result, errorEvent bool) {
	// Fields are gathered first and acted on after: key order varies
	// (Azure sends choices before id and model, and index after delta).
	var id, model, choices, usage, errv gjson.Result
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "id":
			id = v
		case "model":
			model = v
		case "choices":
			choices = v
		case "usage":
			usage = v
		case "error":
			errv = v
		}
		return true
	})
	if d.res.MessageID == "" && id.Type == gjson.String && id.Str != "" {
		d.res.MessageID = strings.Clone(id.Str)
	}
	if d.res.Model == "" && model.Type == gjson.String && model.Str != "" {
		d.res.Model = strings.Clone(model.Str)
	}
	if choices.IsArray() {
		choices.ForEach(func(_, c gjson.Result) bool {
			if c.IsObject() {
				d.choice(c)
			}
			return true
		})
	}
	if usage.IsObject() {
		d.res.Usage = chatUsage(usage)
		d.res.UsageSeen, d.res.UsageFinal = true, true
	}
	switch {
	case errv.IsObject() || errv.Type == gjson.String:
		d.providerError(errv)
	case errorEvent:
		// event: error whose data is the error itself, not wrapped.
		d.providerError(root)
	}
}

func (d *decoder) choice(c gjson.Result) {
	var index int
	var delta, finish gjson.Result
	c.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "index":
			index = int(v.Int())
		case "delta", "message":
			delta = v
		case "finish_reason":
			finish = v
		}
		return true
	})
	if delta.IsObject() {
		d.delta(index, delta)
	}
	if finish.Type == gjson.String && finish.Str != "" {
		d.finishChoice(index, finish.Str)
	}
}

func (d *decoder) delta(choice int, delta gjson.Result) {
	var content, refusal, reasoningContent, reasoning, toolCalls, functionCall gjson.Result
	delta.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "content":
			content = v
		case "refusal":
			refusal = v
		case "reasoning_content": // DeepSeek, xAI
			reasoningContent = v
		case "reasoning": // OpenRouter, Groq
			reasoning = v
		case "tool_calls":
			toolCalls = v
		case "function_call": // legacy functions API
			functionCall = v
		}
		return true
	})
	if reasoningContent.Type != gjson.String || reasoningContent.Str == "" {
		reasoningContent = reasoning // one thinking delta, whichever spelling came
	}
	d.textDelta(openai.Thought, reasoningContent)
	d.textDelta(openai.Said, content)
	d.textDelta(openai.Said, refusal)
	if toolCalls.IsArray() {
		toolCalls.ForEach(func(_, tc gjson.Result) bool {
			if tc.IsObject() {
				d.toolFragment(choice, tc)
			}
			return true
		})
	}
	if functionCall.IsObject() {
		var name gjson.Result
		var args string
		readFunction(functionCall, &name, &args)
		at, _ := locate(d.calls, choice, true, 0, false, false)
		if at < 0 {
			at = d.open(choice, 0, "function_call", "", name.String())
		}
		d.fill(at, "", name.String())
		d.appendArgs(at, args)
	}
}

func (d *decoder) textDelta(kind openai.TextKind, v gjson.Result) {
	if v.Type == gjson.String {
		openai.CountText(&d.res, kind, int64(len(v.Str)))
	}
}

// toolFragment adds one tool_calls[] entry: the first fragment of a call
// carries id, type and name; later ones carry only arguments text.
func (d *decoder) toolFragment(choice int, tc gjson.Result) {
	var index, id, typ, name gjson.Result
	var args string
	tc.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "index":
			index = v
		case "id":
			id = v
		case "type":
			typ = v
		case "function":
			readFunction(v, &name, &args)
		}
		return true
	})
	// Without an index (whole calls in a chat.completion message, and some
	// compatible servers) each id starts the choice's next call.
	at, key := locate(d.calls, choice, false, int(index.Int()), index.Type == gjson.Number, id.String() != "")
	if at < 0 {
		at = d.open(choice, key, typ.String(), id.String(), name.String())
	}
	d.fill(at, id.String(), name.String())
	d.appendArgs(at, args)
}

// readFunction reads the name and arguments of a function object (a tool
// call's "function", a legacy "function_call"), leaving those it lacks as
// they were, so that a repeated "function" member overrides only what it
// carries. The arguments are kept as their raw JSON value, to be decoded
// straight into the call's buffer: a fragment full of escaped quotes then
// costs no string of its own.
func readFunction(fn gjson.Result, name *gjson.Result, args *string) {
	if !fn.IsObject() {
		return
	}
	for m, next, ok := jsonscan.NextMember(fn.Raw, jsonscan.ObjectStart(fn.Raw)); ok; m, next, ok = jsonscan.NextMember(fn.Raw, next) {
		switch m.Name() {
		case "name":
			*name = gjson.Parse(m.Val)
		case "arguments":
			*args = m.Val
		}
	}
}

func (d *decoder) open(choice, index int, typ, id, name string) int {
	if typ == "" {
		typ = "function"
	}
	at := len(d.res.ToolCalls)
	d.res.ToolCalls = append(d.res.ToolCalls, streaming.ToolCall{
		Choice: choice, Index: index, Type: strings.Clone(typ), ID: strings.Clone(id), Name: strings.Clone(name),
	})
	d.calls = append(d.calls, callKey{choice, index})
	return at
}

// fill completes an id or name that a later fragment carried when the
// first did not.
func (d *decoder) fill(at int, id, name string) {
	tc := &d.res.ToolCalls[at]
	if tc.ID == "" && id != "" {
		tc.ID = strings.Clone(id)
	}
	if tc.Name == "" && name != "" {
		tc.Name = strings.Clone(name)
	}
}

// appendArgs adds an arguments fragment, raw: a JSON string, decoded, or
// an object or array as it is written (some compatible servers send
// arguments as an object).
func (d *decoder) appendArgs(at int, raw string) {
	tc := &d.res.ToolCalls[at]
	n := len(tc.Arguments)
	tc.Arguments = jsonscan.AppendValue(tc.Arguments, raw)
	d.res.OutputBytes += int64(len(tc.Arguments) - n)
}

// finishChoice records a choice's stop once (OpenRouter repeats
// finish_reason) after closing the choice's tool calls.
func (d *decoder) finishChoice(choice int, raw string) {
	if d.stopped(choice) {
		return
	}
	for i, c := range d.calls {
		if c.choice == choice {
			d.res.ToolCalls[i].Complete = true
		}
	}
	reason, raw := chatStopReason(raw)
	d.stop(choice, reason, raw)
}

func (d *decoder) stopped(choice int) bool {
	for _, s := range d.res.Stops {
		if s.Choice == choice {
			return true
		}
	}
	return false
}

func (d *decoder) stop(choice int, reason streaming.StopReason, raw string) {
	d.res.Stops = append(d.res.Stops, streaming.Stop{Choice: choice, Reason: reason, Raw: raw})
}

// providerError records an error object (or string). The reply's stop
// becomes an error unless choice 0 already finished: OpenRouter reports
// "Token limit reached" after the choice stopped for length.
func (d *decoder) providerError(v gjson.Result) {
	pe := openai.ProviderError(v)
	d.res.Errors = append(d.res.Errors, pe)
	d.errored = true
	if !d.stopped(0) {
		d.stop(0, streaming.StopError, "error")
	}
}

// chatStopReason normalizes a finish_reason and returns the raw value as a
// string that does not alias the event buffer.
func chatStopReason(raw string) (streaming.StopReason, string) {
	switch raw {
	case "stop":
		return streaming.StopEndTurn, "stop"
	case "length":
		return streaming.StopMaxTokens, "length"
	case "tool_calls":
		return streaming.StopToolUse, "tool_calls"
	case "function_call":
		return streaming.StopToolUse, "function_call"
	case "content_filter":
		return streaming.StopContentFilter, "content_filter"
	}
	raw = strings.Clone(raw)
	return streaming.StopReason(raw), raw
}

// chatUsage normalizes a CompletionUsage object, whichever of the
// compatible providers' extra or missing fields it carries.
func chatUsage(u gjson.Result) streaming.Usage {
	prompt := openai.NonNegative(u.Get("prompt_tokens").Int())
	completion := openai.NonNegative(u.Get("completion_tokens").Int())
	total := openai.NonNegative(u.Get("total_tokens").Int())
	cached := openai.NonNegative(u.Get("prompt_tokens_details.cached_tokens").Int())
	if cached == 0 {
		// DeepSeek reports its cache hits in a field of its own.
		cached = openai.NonNegative(u.Get("prompt_cache_hit_tokens").Int())
	}
	write := openai.NonNegative(u.Get("prompt_tokens_details.cache_write_tokens").Int())
	reasoning := openai.NonNegative(u.Get("completion_tokens_details.reasoning_tokens").Int())
	output := completion
	if reasoning > 0 && total == prompt+completion+reasoning {
		// xAI counts reasoning outside completion_tokens (but inside total).
		output += reasoning
	}
	return openai.Usage(prompt, cached, write, output, reasoning)
}

// decodeJSON decodes a non-streaming chat.completion body (or an error
// body) into the Result its stream would give.
func decodeJSON(body []byte) (*streaming.Result, error) {
	body, repeated := streaming.Unrepeated(body)
	root, err := openai.Object(bytes.TrimSpace(body), "chat completion")
	if err != nil {
		return nil, err
	}
	d := newDecoder()
	d.res.Ambiguous = repeated
	d.chunk(root, false)
	d.res.Done = true
	for i := range d.res.ToolCalls {
		d.res.ToolCalls[i].Complete = true // a message's calls are whole
	}
	return d.Finish(), nil
}
