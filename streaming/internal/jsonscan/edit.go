package jsonscan

import (
	"slices"
	"unicode/utf8"
)

// Splicing.

// span is the byte range [start, end) of a value in a body.
type Span struct{ Start, End int }

// member is one member of a JSON object in a body: its key as written
// (quotes removed, escapes kept), the offset of the key's opening quote,
// and its value.
type SpanMember struct {
	Key   string
	Start int
	Val   Span
}

// edit replaces body[start:end] with text.
type Edit struct {
	Start, End int
	Text       string
}

// splice returns a new body with the sorted, disjoint edits applied.
func ApplyEdits(body []byte, edits []Edit) []byte {
	n := len(body)
	for _, e := range edits {
		n += len(e.Text) - (e.End - e.Start)
	}
	out := make([]byte, 0, n)
	at := 0
	for _, e := range edits {
		out = append(out, body[at:e.Start]...)
		out = append(out, e.Text...)
		at = e.End
	}
	return append(out, body[at:]...)
}

// RemoveItems appends the edits that remove, from one array or object whose
// items (elements, or members from key to value) lie between open (just
// past its opening bracket) and closing (its closing bracket), the items
// whose drop is set. A removed item takes with it the separator before it,
// or after it when no kept item precedes it, so that kept items and the
// whitespace around them stay byte for byte; when every item goes, so does
// everything between the brackets.
func RemoveItems(edits []Edit, items []Span, drop []bool, open, closing int) []Edit {
	if len(items) > 0 && !slices.Contains(drop, false) {
		return append(edits, Edit{Start: open, End: closing})
	}
	kept := -1 // the last kept item
	for i := 0; i < len(items); {
		if !drop[i] {
			kept = i
			i++
			continue
		}
		j := i
		for j < len(items) && drop[j] {
			j++
		}
		if kept >= 0 {
			edits = append(edits, Edit{Start: items[kept].End, End: items[j-1].End})
		} else { // a kept item follows: not everything goes
			edits = append(edits, Edit{Start: items[i].Start, End: items[j].Start})
		}
		i = j
	}
	return edits
}

// ObjectMembers appends the members of the object whose opening brace is
// at s[open], and returns them with the offset of its closing brace (len(s)
// on text that breaks off). It reads text checkObject accepted.
func ObjectMembers(dst []SpanMember, s string, open int) ([]SpanMember, int) {
	i := open + 1
	for n := 0; n < len(s); n++ { // every member consumes input
		start := SkipSpace(s, i)
		if start < len(s) && s[start] == ',' {
			start = SkipSpace(s, start+1)
		}
		m, next, ok := NextMember(s, i)
		if !ok {
			return dst, next
		}
		dst = append(dst, SpanMember{Key: m.Key, Start: start, Val: Span{m.Off, next}})
		i = next
	}
	return dst, len(s)
}

// ArrayItems appends the elements of the array whose opening bracket is at
// s[open], and returns them with the offset of its closing bracket.
func ArrayItems(dst []Span, s string, open int) ([]Span, int) {
	i := open + 1
	for n := 0; n < len(s); n++ {
		i = SkipSpace(s, i)
		if i < len(s) && s[i] == ',' {
			i = SkipSpace(s, i+1)
		}
		if i >= len(s) || s[i] == ']' {
			return dst, min(i, len(s))
		}
		e := SkipValue(s, i)
		if e == i {
			return dst, len(s)
		}
		dst = append(dst, Span{i, e})
		i = e
	}
	return dst, len(s)
}

// MemberSpans is the span of each member, key to value.
func MemberSpans(ms []SpanMember) []Span {
	out := make([]Span, len(ms))
	for i, m := range ms {
		out[i] = Span{m.Start, m.Val.End}
	}
	return out
}

// FindMember is the value of the first member named key of the object at
// s[obj], as gjson would pick it.
func FindMember(s string, obj int, key string) (Span, bool) {
	if obj >= len(s) || s[obj] != '{' {
		return Span{}, false
	}
	i := obj + 1
	for n := 0; n < len(s); n++ {
		m, next, ok := NextMember(s, i)
		if !ok {
			break
		}
		if KeyEqual(m.Key, key) {
			return Span{m.Off, next}, true
		}
		i = next
	}
	return Span{}, false
}

// LastMember is the value of the last top-level member of the object s
// named Key: the one the providers' decoders keep.
func LastMember(s, key string) (Span, bool) {
	var found Span
	ok := false
	i := ObjectStart(s)
	for n := 0; n < len(s); n++ {
		m, next, more := NextMember(s, i)
		if !more {
			break
		}
		if KeyEqual(m.Key, key) {
			found, ok = Span{m.Off, next}, true
		}
		i = next
	}
	return found, ok
}

func IsArrayAt(s string, v Span) bool  { return v.Start < v.End && s[v.Start] == '[' }
func IsObjectAt(s string, v Span) bool { return v.Start < v.End && s[v.Start] == '{' }

func IsSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// AppendQuoted appends s as a JSON string literal. Invalid UTF-8
// becomes U+FFFD, as encoding/json does; HTML characters are left as they
// are, since nothing renders the body as HTML.
func AppendQuoted(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			// Valid JSON, but not valid JavaScript in older engines.
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
