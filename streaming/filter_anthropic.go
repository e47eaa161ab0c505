package streaming

import (
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Anthropic Messages: a refused tool_use block becomes a text block at the
// same index.

type anthropicCallFilter struct {
	withheld  []int // indices of refused blocks whose stop has not come
	refused   bool  // a call of the message was refused
	delivered bool  // an allowed client tool_use was delivered
}

func (f *CallFilter) anthropicEvent(dst []byte, ev *Event) []byte {
	a := &f.anthropic
	js := jsonView(ev.Data)
	if a.refused && !gjson.Valid(js) {
		return dst // see chatEvent
	}
	var typ, index, block jsonMember
	for m, next, ok := nextMember(js, objectStart(js)); ok; m, next, ok = nextMember(js, next) {
		switch m.name() {
		case "type":
			typ = firstMember(typ, m)
		case "index":
			index = firstMember(index, m)
		case "content_block":
			block = firstMember(block, m)
		}
	}
	name, _ := stringValue(typ.val)
	if name == "" || string(ev.Name) == "error" {
		name = jsonView(ev.Name)
	}
	switch name {
	case "content_block_start":
		return f.anthropicStart(dst, ev, index, block)
	case "content_block_delta":
		if a.withheldAt(index) >= 0 {
			return dst
		}
	case "content_block_stop":
		if i := a.withheldAt(index); i >= 0 {
			pos := a.withheld[i]
			a.withheld = slices.Delete(a.withheld, i, i+1)
			b := append(f.scratch[:0], `{"type":"content_block_stop","index":`...)
			b = strconv.AppendInt(b, int64(pos), 10)
			f.scratch = append(b, '}')
			return appendEventFrame(keepBOM(dst, ev), frameName(ev, "content_block_stop"), f.scratch)
		}
	case "message_delta":
		if a.refused && !a.delivered {
			return f.anthropicMessageDelta(dst, ev, js)
		}
	}
	return append(dst, ev.Raw...)
}

// withheldAt is the position in withheld of the block index m names, -1
// when that block is not withheld.
func (a *anthropicCallFilter) withheldAt(m jsonMember) int {
	if len(a.withheld) == 0 {
		return -1
	}
	pos, ok := memberIndex(m)
	if !ok {
		return -1
	}
	return slices.Index(a.withheld, pos)
}

func (f *CallFilter) anthropicStart(dst []byte, ev *Event, index, block jsonMember) []byte {
	a := &f.anthropic
	pos, ok := memberIndex(index)
	if i := slices.Index(a.withheld, pos); ok && i >= 0 {
		// A block started again at a withheld index replaces it.
		a.withheld = slices.Delete(a.withheld, i, i+1)
	}
	fields := readObject(block.val, "type", "id", "name")
	if !isString(fields[0], "tool_use") {
		return append(dst, ev.Raw...) // server tools, text, thinking, results
	}
	name, _ := stringValue(fields[2])
	if f.allow(name) {
		// The decoder skips an event that is not JSON: no call came with it.
		a.delivered = a.delivered || gjson.Valid(jsonView(ev.Data))
		return append(dst, ev.Raw...)
	}
	id, _ := stringValue(fields[1])
	text := f.refuse(ToolCall{Index: pos, Type: "tool_use", ID: strings.Clone(id), Name: strings.Clone(name)})
	a.refused = true
	if !ok {
		return dst // no index to put the text at
	}
	a.withheld = append(a.withheld, pos)
	dst = keepBOM(dst, ev)
	b := append(f.scratch[:0], `{"type":"content_block_start","index":`...)
	b = strconv.AppendInt(b, int64(pos), 10)
	b = append(b, `,"content_block":{"type":"text","text":""}}`...)
	dst = appendEventFrame(dst, frameName(ev, "content_block_start"), b)
	b = append(b[:0], `{"type":"content_block_delta","index":`...)
	b = strconv.AppendInt(b, int64(pos), 10)
	b = append(b, `,"delta":{"type":"text_delta","text":`...)
	b = appendJSONLiteral(b, text)
	b = append(b, "}}"...)
	f.scratch = b
	return appendEventFrame(dst, frameName(ev, "content_block_delta"), b)
}

// anthropicMessageDelta turns a tool_use stop into end_turn once every
// call of the message was withheld: the agent has no call to answer.
func (f *CallFilter) anthropicMessageDelta(dst []byte, ev *Event, js string) []byte {
	if !gjson.Valid(js) {
		return append(dst, ev.Raw...)
	}
	changed := false
	f.scratch = filterObject(f.scratch[:0], js, func(dst []byte, m jsonMember) ([]byte, filterAction) {
		if m.name() != "delta" || !isObject(m.val) {
			return dst, filterKeep
		}
		return filterObject(dst, m.val, func(dst []byte, m jsonMember) ([]byte, filterAction) {
			if m.name() == "stop_reason" && isString(m.val, "tool_use") {
				changed = true
				return append(dst, `"end_turn"`...), filterReplace
			}
			return dst, filterKeep
		}, nil), filterReplace
	}, nil)
	if !changed {
		return append(dst, ev.Raw...)
	}
	return appendEventFrame(keepBOM(dst, ev), jsonView(ev.Name), f.scratch)
}

// anthropicBody rewrites a Message: refused tool_use blocks become text
// blocks, and stop_reason follows. It returns nil when nothing changes.
func (f *CallFilter) anthropicBody(js string) []byte {
	if isString(memberRaw(js, "type"), "error") {
		return nil
	}
	var texts []int // per content block in walk order: the refused call replacing it, or -1
	refused, delivered := false, false
	for m, next, ok := nextMember(js, objectStart(js)); ok; m, next, ok = nextMember(js, next) {
		if m.name() != "content" {
			continue
		}
		it := newArrayIter(m.val)
		pos := 0
		for block, ok := it.next(); ok; block, ok = it.next() {
			fields := readObject(block, "type", "id", "name")
			r := -1
			if isString(fields[0], "tool_use") {
				name, _ := stringValue(fields[2])
				if f.allow(name) {
					delivered = true
				} else {
					id, _ := stringValue(fields[1])
					f.refuse(ToolCall{Index: pos, Type: "tool_use", ID: strings.Clone(id), Name: strings.Clone(name)})
					r, refused = len(f.refused)-1, true
				}
			}
			texts = append(texts, r)
			pos++
		}
	}
	if !refused {
		return nil
	}
	next := 0
	return filterObject(nil, js, func(dst []byte, m jsonMember) ([]byte, filterAction) {
		switch m.name() {
		case "content":
			if !isJSONArray(m.val) {
				return dst, filterKeep
			}
			dst, _, _ = filterArray(dst, m.val, func(dst []byte, block string) ([]byte, filterAction) {
				r := texts[next]
				next++
				if r < 0 {
					return dst, filterKeep
				}
				dst = append(dst, `{"type":"text","text":`...)
				return append(appendJSONLiteral(dst, f.texts[r]), '}'), filterReplace
			})
			return dst, filterReplace
		case "stop_reason":
			if !delivered && isString(m.val, "tool_use") {
				return append(dst, `"end_turn"`...), filterReplace
			}
		}
		return dst, filterKeep
	}, nil)
}
