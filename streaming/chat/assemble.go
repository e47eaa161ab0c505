package chat

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/reshape"
)

// assembledChoice is one choice of a ChatCompletion being assembled.
type assembledChoice struct {
	index        int
	role         string
	content      strings.Builder
	contentSeen  bool
	refusal      strings.Builder
	refusalSeen  bool
	reasoning    strings.Builder // reasoning_content (DeepSeek and others)
	reasonSeen   bool
	calls        []*assembledCall
	byIndex      map[int]*assembledCall
	legacy       *assembledCall // deprecated function_call
	finishReason string         // raw JSON
}

type assembledCall struct {
	index         int
	id, typ, name string
	args          strings.Builder
	custom        bool
}

func assemble(evs []reshape.Event) ([]byte, error) {
	var (
		choices []*assembledChoice
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
	choice := func(i int) *assembledChoice {
		for _, c := range choices {
			if c.index == i {
				return c
			}
		}
		c := &assembledChoice{index: i, role: "assistant"}
		choices = append(choices, c)
		return c
	}
	for i := range evs {
		if evs[i].HasData && strings.TrimSpace(evs[i].Data) == "[DONE]" {
			continue // the stop is each choice's finish_reason
		}
		js, ok, err := evs[i].JSON(streaming.APIChat)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if gjson.Get(js, "error").Exists() {
			return nil, fmt.Errorf("%w: the stream carries an error", streaming.ErrIncompleteStream)
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
		return nil, streaming.ErrIncompleteStream
	}
	slices.SortStableFunc(choices, func(a, b *assembledChoice) int { return cmp.Compare(a.index, b.index) })
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

func (c *assembledChoice) addDelta(d gjson.Result) {
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
			c.legacy = &assembledCall{}
		}
		if n := fc.Get("name").Str; n != "" && c.legacy.name == "" {
			c.legacy.name = n
		}
		c.legacy.args.WriteString(fc.Get("arguments").Str)
	}
	for _, el := range d.Get("tool_calls").Array() {
		var call *assembledCall
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

func (c *assembledChoice) call(index int) *assembledCall {
	if call, ok := c.byIndex[index]; ok {
		return call
	}
	if c.byIndex == nil {
		c.byIndex = map[int]*assembledCall{}
	}
	call := &assembledCall{index: index}
	c.calls = append(c.calls, call)
	c.byIndex[index] = call
	return call
}

func (c *assembledChoice) appendJSON(b []byte) []byte {
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
		slices.SortStableFunc(c.calls, func(x, y *assembledCall) int { return cmp.Compare(x.index, y.index) })
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

func (call *assembledCall) appendJSON(b []byte) []byte {
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
