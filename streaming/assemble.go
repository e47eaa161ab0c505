package streaming

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming/internal/jsonscan"
)

// AssembleJSON returns the non-streamed reply body the provider would have
// sent for a complete stream (Anthropic Message, Chat ChatCompletion,
// Responses Response object), content exactly as streamed (thinking blocks
// and signatures included). ErrIncompleteStream when the stream has no
// stop/terminal event, or ends on a provider error; ErrInvalidJSON when an
// event's data is not JSON, or a tool call's streamed input is not.
func AssembleJSON(api API, stream []byte) ([]byte, error) {
	evs, err := readEvents(stream)
	if err != nil {
		return nil, err
	}
	switch api {
	case APIAnthropic:
		return assembleAnthropic(evs)
	case APIChat:
		return assembleChat(evs)
	case APIResponses:
		resp, _, err := responsesTerminal(evs)
		if err != nil {
			return nil, err
		}
		return []byte(resp), nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownAPI, string(api))
}

// assembledBlock is one content block being assembled.
type assembledBlock struct {
	index     int
	start     string // the content_block_start's block
	text      strings.Builder
	partial   strings.Builder // input_json_delta fragments
	thinking  strings.Builder
	signature string
	citations []string
	deltas    map[string]bool // delta kinds seen
}

// anthropicMessage is a Message assembled from its stream.
type anthropicMessage struct {
	base    string // message_start's message
	blocks  []*assembledBlock
	byIndex map[int]*assembledBlock
	delta   []jsonscan.Set // message_delta's delta members, the stop among them
	usage   []jsonscan.Set // message_delta's non-null usage members
	stopped bool           // a stop_reason came
}

func assembleAnthropic(evs []streamEvent) ([]byte, error) {
	m, err := readAnthropicMessage(evs)
	if err != nil {
		return nil, err
	}
	return m.body()
}

func readAnthropicMessage(evs []streamEvent) (*anthropicMessage, error) {
	m := &anthropicMessage{byIndex: map[int]*assembledBlock{}}
	for i := range evs {
		js, ok, err := evs[i].jsonEvent(APIAnthropic)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		switch typ := gjson.Get(js, "type").Str; typ {
		case "message_start":
			m.base = gjson.Get(js, "message").Raw
		case "content_block_start":
			idx := gjson.Get(js, "index")
			block := gjson.Get(js, "content_block")
			if idx.Type != gjson.Number || !block.IsObject() {
				return nil, fmt.Errorf("%w: anthropic content_block_start without index or block", ErrInvalidJSON)
			}
			b := &assembledBlock{index: int(idx.Int()), start: block.Raw, deltas: map[string]bool{}}
			if old, ok := m.byIndex[b.index]; ok {
				// A block started again at an index replaces it.
				m.blocks = slices.DeleteFunc(m.blocks, func(x *assembledBlock) bool { return x == old })
			}
			m.blocks = append(m.blocks, b)
			m.byIndex[b.index] = b
		case "content_block_delta":
			b := m.block(int(gjson.Get(js, "index").Int()))
			if b == nil {
				return nil, fmt.Errorf("%w: anthropic delta for a block that did not start", ErrInvalidJSON)
			}
			b.add(gjson.Get(js, "delta"))
		case "message_delta":
			gjson.Get(js, "delta").ForEach(func(k, v gjson.Result) bool {
				m.delta = append(m.delta, jsonscan.Set{Key: k.Str, Val: v.Raw})
				if k.Str == "stop_reason" && v.Type == gjson.String {
					m.stopped = true
				}
				return true
			})
			gjson.Get(js, "usage").ForEach(func(k, v gjson.Result) bool {
				if v.Type != gjson.Null {
					m.usage = append(m.usage, jsonscan.Set{Key: k.Str, Val: v.Raw})
				}
				return true
			})
		case "error":
			return nil, fmt.Errorf("%w: the stream ended on an error event", ErrIncompleteStream)
		}
	}
	if m.base == "" || !jsonscan.IsObject(m.base) || !m.stopped {
		return nil, ErrIncompleteStream
	}
	if gjson.Get(m.base, "type").Str != "message" {
		return nil, fmt.Errorf("%w: anthropic message_start without a message", ErrInvalidJSON)
	}
	slices.SortStableFunc(m.blocks, func(a, b *assembledBlock) int { return cmp.Compare(a.index, b.index) })
	return m, nil
}

func (m *anthropicMessage) block(index int) *assembledBlock { return m.byIndex[index] }

func (b *assembledBlock) add(delta gjson.Result) {
	kind := delta.Get("type").Str
	b.deltas[kind] = true
	switch kind {
	case "text_delta":
		b.text.WriteString(delta.Get("text").Str)
	case "input_json_delta":
		b.partial.WriteString(delta.Get("partial_json").Str)
	case "thinking_delta":
		b.thinking.WriteString(delta.Get("thinking").Str)
	case "signature_delta":
		b.signature = delta.Get("signature").Str
	case "citations_delta":
		if c := delta.Get("citation"); c.Exists() {
			b.citations = append(b.citations, c.Raw)
		}
	}
}

// json is the block as a Message holds it.
func (b *assembledBlock) json() (string, error) {
	var set []jsonscan.Set
	start := gjson.Parse(b.start)
	if b.deltas["text_delta"] {
		set = append(set, jsonscan.Set{Key: "text", Val: jsonscan.Quote(start.Get("text").Str + b.text.String())})
	}
	if len(b.citations) > 0 {
		prior := start.Get("citations").Array()
		all := make([]string, 0, len(prior)+len(b.citations))
		for _, c := range prior {
			all = append(all, c.Raw)
		}
		all = append(all, b.citations...)
		set = append(set, jsonscan.Set{Key: "citations", Val: "[" + strings.Join(all, ",") + "]"})
	}
	if b.deltas["thinking_delta"] {
		set = append(set, jsonscan.Set{Key: "thinking", Val: jsonscan.Quote(start.Get("thinking").Str + b.thinking.String())})
	}
	if b.deltas["signature_delta"] {
		set = append(set, jsonscan.Set{Key: "signature", Val: jsonscan.Quote(b.signature)})
	}
	if start.Get("input").Exists() || b.deltas["input_json_delta"] {
		input := strings.TrimSpace(b.partial.String())
		switch {
		case input == "":
			input = "{}"
		case !gjson.Valid(input):
			return "", fmt.Errorf("%w: the input of %s block %d", ErrInvalidJSON, start.Get("type").Str, b.index)
		}
		set = append(set, jsonscan.Set{Key: "input", Val: input})
	}
	return string(jsonscan.SetMembers(nil, b.start, set...)), nil
}

func (m *anthropicMessage) content() (string, error) {
	var sb strings.Builder
	sb.WriteByte('[')
	for i, b := range m.blocks {
		js, err := b.json()
		if err != nil {
			return "", err
		}
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(js)
	}
	sb.WriteByte(']')
	return sb.String(), nil
}

func (m *anthropicMessage) body() ([]byte, error) {
	content, err := m.content()
	if err != nil {
		return nil, err
	}
	set := append([]jsonscan.Set{{Key: "content", Val: content}}, m.delta...)
	set = append(set, jsonscan.Set{Key: "usage", Val: m.usageJSON()})
	return jsonscan.SetMembers(nil, m.base, set...), nil
}

// usageJSON is the Message's final usage: message_start's overlaid with
// the non-null usage members of its message_delta events.
func (m *anthropicMessage) usageJSON() string {
	usage := gjson.Get(m.base, "usage").Raw
	if !jsonscan.IsObject(usage) {
		usage = "{}"
	}
	return string(jsonscan.SetMembers(nil, usage, m.usage...))
}

// chatChoice is one choice of a ChatCompletion being assembled.
type chatChoice struct {
	index        int
	role         string
	content      strings.Builder
	contentSeen  bool
	refusal      strings.Builder
	refusalSeen  bool
	reasoning    strings.Builder // reasoning_content (DeepSeek and others)
	reasonSeen   bool
	calls        []*chatAssembledCall
	byIndex      map[int]*chatAssembledCall
	legacy       *chatAssembledCall // deprecated function_call
	finishReason string             // raw JSON
}

type chatAssembledCall struct {
	index         int
	id, typ, name string
	args          strings.Builder
	custom        bool
}

func assembleChat(evs []streamEvent) ([]byte, error) {
	var (
		choices []*chatChoice
		top     []jsonscan.Set // id, created, model, system_fingerprint, service_tier
		usage   string
	)
	setTop := func(js string) {
		for _, k := range []string{"id", "created", "model", "system_fingerprint", "service_tier"} {
			v := gjson.Get(js, k)
			if !v.Exists() || v.Type == gjson.Null || v.Str == "" && v.Type == gjson.String ||
				slices.ContainsFunc(top, func(m jsonscan.Set) bool { return m.Key == k }) {
				continue
			}
			if k == "created" && v.Int() == 0 {
				continue // Azure's first chunk: created 0, id ""
			}
			top = append(top, jsonscan.Set{Key: k, Val: v.Raw})
		}
	}
	choice := func(i int) *chatChoice {
		for _, c := range choices {
			if c.index == i {
				return c
			}
		}
		c := &chatChoice{index: i, role: "assistant"}
		choices = append(choices, c)
		return c
	}
	for i := range evs {
		if evs[i].hasData && strings.TrimSpace(evs[i].data) == "[DONE]" {
			continue // the stop is each choice's finish_reason
		}
		js, ok, err := evs[i].jsonEvent(APIChat)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if gjson.Get(js, "error").Exists() {
			return nil, fmt.Errorf("%w: the stream carries an error", ErrIncompleteStream)
		}
		setTop(js)
		if u := gjson.Get(js, "usage"); u.IsObject() {
			usage = u.Raw
		}
		for _, ch := range gjson.Get(js, "choices").Array() {
			c := choice(int(ch.Get("index").Int()))
			c.addDelta(ch.Get("delta"))
			if fr := ch.Get("finish_reason"); fr.Type == gjson.String {
				c.finishReason = fr.Raw
			}
		}
	}
	finished := len(choices) > 0
	for _, c := range choices {
		finished = finished && c.finishReason != ""
	}
	if !finished {
		return nil, ErrIncompleteStream
	}
	slices.SortStableFunc(choices, func(a, b *chatChoice) int { return cmp.Compare(a.index, b.index) })
	var b []byte
	b = append(b, '{')
	b = appendTop(b, top, "id")
	b = append(b, `"object":"chat.completion",`...)
	b = appendTop(b, top, "created")
	b = appendTop(b, top, "model")
	b = append(b, `"choices":[`...)
	for i, c := range choices {
		if i > 0 {
			b = append(b, ',')
		}
		b = c.appendJSON(b)
	}
	b = append(b, ']')
	if usage != "" {
		b = append(append(b, `,"usage":`...), usage...)
	}
	for _, k := range []string{"system_fingerprint", "service_tier"} {
		if v := topValue(top, k); v != "" {
			b = jsonscan.AppendQuoted(append(b, ','), k)
			b = append(append(b, ':'), v...)
		}
	}
	return append(b, '}'), nil
}

func topValue(top []jsonscan.Set, key string) string {
	for _, m := range top {
		if m.Key == key {
			return m.Val
		}
	}
	return ""
}

// appendTop appends `"key":value,` from top, null when absent.
func appendTop(b []byte, top []jsonscan.Set, key string) []byte {
	v := topValue(top, key)
	if v == "" {
		v = "null"
	}
	b = jsonscan.AppendQuoted(b, key)
	return append(append(append(b, ':'), v...), ',')
}

func (c *chatChoice) addDelta(d gjson.Result) {
	if r := d.Get("role"); r.Type == gjson.String && r.Str != "" {
		c.role = r.Str
	}
	if v := d.Get("content"); v.Type == gjson.String {
		c.content.WriteString(v.Str)
		c.contentSeen = true
	}
	if v := d.Get("refusal"); v.Type == gjson.String {
		c.refusal.WriteString(v.Str)
		c.refusalSeen = true
	}
	if v := d.Get("reasoning_content"); v.Type == gjson.String {
		c.reasoning.WriteString(v.Str)
		c.reasonSeen = true
	}
	if fc := d.Get("function_call"); fc.IsObject() {
		if c.legacy == nil {
			c.legacy = &chatAssembledCall{}
		}
		if n := fc.Get("name").Str; n != "" && c.legacy.name == "" {
			c.legacy.name = n
		}
		c.legacy.args.WriteString(fc.Get("arguments").Str)
	}
	for _, el := range d.Get("tool_calls").Array() {
		var call *chatAssembledCall
		idx := el.Get("index")
		switch {
		case idx.Type == gjson.Number:
			call = c.call(int(idx.Int()))
		case el.Get("id").Str != "" || len(c.calls) == 0:
			call = c.call(len(c.calls))
		default:
			call = c.calls[len(c.calls)-1]
		}
		if v := el.Get("id").Str; v != "" && call.id == "" {
			call.id = v
		}
		if v := el.Get("type").Str; v != "" && call.typ == "" {
			call.typ = v
		}
		if fn := el.Get("function"); fn.IsObject() {
			if v := fn.Get("name").Str; v != "" && call.name == "" {
				call.name = v
			}
			call.args.WriteString(fn.Get("arguments").Str)
		}
		if cu := el.Get("custom"); cu.IsObject() {
			call.custom = true
			if v := cu.Get("name").Str; v != "" && call.name == "" {
				call.name = v
			}
			call.args.WriteString(cu.Get("input").Str)
		}
	}
}

func (c *chatChoice) call(index int) *chatAssembledCall {
	if call, ok := c.byIndex[index]; ok {
		return call
	}
	if c.byIndex == nil {
		c.byIndex = map[int]*chatAssembledCall{}
	}
	call := &chatAssembledCall{index: index}
	c.calls = append(c.calls, call)
	c.byIndex[index] = call
	return call
}

func (c *chatChoice) appendJSON(b []byte) []byte {
	b = strconv.AppendInt(append(b, `{"index":`...), int64(c.index), 10)
	b = jsonscan.AppendQuoted(append(b, `,"message":{"role":`...), c.role)
	b = append(b, `,"content":`...)
	if c.contentSeen {
		b = jsonscan.AppendQuoted(b, c.content.String())
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"refusal":`...)
	if c.refusalSeen {
		b = jsonscan.AppendQuoted(b, c.refusal.String())
	} else {
		b = append(b, "null"...)
	}
	if c.reasonSeen {
		b = jsonscan.AppendQuoted(append(b, `,"reasoning_content":`...), c.reasoning.String())
	}
	if c.legacy != nil {
		b = jsonscan.AppendQuoted(append(b, `,"function_call":{"name":`...), c.legacy.name)
		b = jsonscan.AppendQuoted(append(b, `,"arguments":`...), c.legacy.args.String())
		b = append(b, '}')
	}
	if len(c.calls) > 0 {
		slices.SortStableFunc(c.calls, func(x, y *chatAssembledCall) int { return cmp.Compare(x.index, y.index) })
		b = append(b, `,"tool_calls":[`...)
		for i, call := range c.calls {
			if i > 0 {
				b = append(b, ',')
			}
			b = call.appendJSON(b)
		}
		b = append(b, ']')
	}
	b = append(b, `},"logprobs":null,"finish_reason":`...)
	b = append(b, c.finishReason...)
	return append(b, '}')
}

func (call *chatAssembledCall) appendJSON(b []byte) []byte {
	typ := call.typ
	if typ == "" {
		typ = "function"
		if call.custom {
			typ = "custom"
		}
	}
	b = jsonscan.AppendQuoted(append(b, `{"id":`...), call.id)
	b = jsonscan.AppendQuoted(append(b, `,"type":`...), typ)
	if typ == "custom" {
		b = jsonscan.AppendQuoted(append(b, `,"custom":{"name":`...), call.name)
		b = jsonscan.AppendQuoted(append(b, `,"input":`...), call.args.String())
	} else {
		b = jsonscan.AppendQuoted(append(b, `,"function":{"name":`...), call.name)
		b = jsonscan.AppendQuoted(append(b, `,"arguments":`...), call.args.String())
	}
	return append(b, "}}"...)
}

// responsesTerminal finds the terminal event of a Responses stream and
// returns its response object and the event's position.
func responsesTerminal(evs []streamEvent) (resp string, at int, err error) {
	for i := range evs {
		js, ok, err := evs[i].jsonEvent(APIResponses)
		if err != nil {
			return "", -1, err
		}
		if !ok {
			continue
		}
		switch gjson.Get(js, "type").Str {
		case "response.completed", "response.incomplete", "response.failed":
			r := gjson.Get(js, "response")
			if !r.IsObject() || !r.Get("output").IsArray() {
				return "", -1, fmt.Errorf("%w: responses terminal event without a response", ErrInvalidJSON)
			}
			return r.Raw, i, nil
		}
	}
	return "", -1, ErrIncompleteStream
}
