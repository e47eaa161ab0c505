package jsonscan

import "github.com/tidwall/gjson"

// Writing JSON.

// Action says what an edit callback did with a member or element.
type Action uint8

const (
	Keep    Action = iota // copy it as it came
	Replace               // the callback appended the new value
	Drop                  // leave it out
)

// FilterObject appends the JSON object obj to dst member by member. edit,
// called with the member's key already written, may append a new value or
// drop the member; add, when not nil, appends members after the last one
// (sep says whether a comma must come first). Whitespace between members is
// not kept. obj must be valid JSON.
func FilterObject(dst []byte, obj string, edit func(dst []byte, m Member) ([]byte, Action), add func(dst []byte, sep bool) []byte) []byte {
	dst = append(dst, '{')
	n := 0
	for m, next, ok := NextMember(obj, ObjectStart(obj)); ok; m, next, ok = NextMember(obj, next) {
		mark := len(dst)
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		dst = append(dst, m.Key...)
		dst = append(dst, '"', ':')
		var act Action
		dst, act = edit(dst, m)
		switch act {
		case Keep:
			dst = append(dst, m.Val...)
		case Drop:
			dst = dst[:mark]
			continue
		}
		n++
	}
	if add != nil {
		dst = add(dst, n > 0)
	}
	return append(dst, '}')
}

// FilterArray appends the JSON array arr to dst element by element, as
// FilterObject does members, and returns how many elements it had and how
// many it kept.
func FilterArray(dst []byte, arr string, edit func(dst []byte, elem string) ([]byte, Action)) (out []byte, total, kept int) {
	dst = append(dst, '[')
	it := NewArrayIter(arr)
	for el, ok := it.Next(); ok; el, ok = it.Next() {
		total++
		mark := len(dst)
		if kept > 0 {
			dst = append(dst, ',')
		}
		var act Action
		dst, act = edit(dst, el)
		switch act {
		case Keep:
			dst = append(dst, el...)
		case Drop:
			dst = dst[:mark]
			continue
		}
		kept++
	}
	return append(dst, ']'), total, kept
}

// Reading JSON as the OpenAI decoders do.

// Text is what gjson's String gives for the raw value: the decoded
// text of a string, the raw text of a number or an object, "" for null.
func Text(raw string) string {
	if raw == "" {
		return ""
	}
	if s, ok := StringValue(raw); ok {
		return s
	}
	return gjson.Parse(raw).String()
}

// Int is what gjson's Int gives for the raw value, 0 when absent.
func Int(raw string) int {
	if raw == "" {
		return 0
	}
	return int(gjson.Parse(raw).Int())
}

// AppendValue appends the raw value as the decoders take arguments: a
// string decoded, an object or array as written, anything else nothing.
func AppendValue(dst []byte, raw string) []byte {
	switch {
	case IsStringRaw(raw):
		return AppendDecoded(dst, raw)
	case IsObject(raw) || IsArray(raw):
		return append(dst, raw...)
	}
	return dst
}

// LastMemberRaw returns the raw value of the last member named key of the
// object obj, or cur when it has none.
func LastMemberRaw(obj, key, cur string) string {
	for m, next, ok := NextMember(obj, ObjectStart(obj)); ok; m, next, ok = NextMember(obj, next) {
		if KeyEqual(m.Key, key) {
			cur = m.Val
		}
	}
	return cur
}

// IsArray reports whether raw, a value as the walkers return it, is an
// array.
func IsArray(raw string) bool { return len(raw) > 0 && raw[0] == '[' }

// Set is a member to set on an object: key as written (no quotes),
// and a valid JSON value.
type Set struct{ Key, Val string }

// Members appends to dst the members named keys that the JSON object obj
// has, as gjson finds them, in keys' order: what a reply's reshaping
// carries over from one object to another.
func Members(dst []Set, obj string, keys ...string) []Set {
	for _, k := range keys {
		if v := gjson.Get(obj, k); v.Exists() {
			dst = append(dst, Set{Key: k, Val: v.Raw})
		}
	}
	return dst
}

// SetMembers returns the JSON object obj (valid JSON) with every member
// named in set given its value, each in place (a duplicate key takes the
// same value), and the members obj lacks added at its end in set's order.
// Members whose val is empty are removed instead.
func SetMembers(dst []byte, obj string, set ...Set) []byte {
	seen := make([]bool, len(set))
	return FilterObject(dst, obj, func(dst []byte, m Member) ([]byte, Action) {
		for i, s := range set {
			if KeyEqual(m.Key, s.Key) {
				seen[i] = true
				if s.Val == "" {
					return dst, Drop
				}
				return append(dst, s.Val...), Replace
			}
		}
		return dst, Keep
	}, func(dst []byte, sep bool) []byte {
		for i, s := range set {
			if seen[i] || s.Val == "" {
				continue
			}
			if sep {
				dst = append(dst, ',')
			}
			sep = true
			dst = AppendQuoted(dst, s.Key)
			dst = append(append(dst, ':'), s.Val...)
		}
		return dst
	})
}

// Quote is s as a JSON string literal.
func Quote(s string) string { return string(AppendQuoted(nil, s)) }

// Event builds one event's JSON: {"type":typ, members...}.
func Event(typ string, members ...Set) []byte {
	b := AppendQuoted([]byte(`{"type":`), typ)
	for _, m := range members {
		b = append(b, ',')
		b = AppendQuoted(b, m.Key)
		b = append(append(b, ':'), m.Val...)
	}
	return append(b, '}')
}
