package streaming

import (
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
)

// Reading event data in place. Event data lives in the Reader's buffer only
// for the length of one Decode call, so these helpers hand out views into it
// and leave copying to the callers that keep a value.

// cloneStr copies a string value out of the event data (which the Reader
// reuses), or returns "" when r is not a string.
func cloneStr(r gjson.Result) string {
	if r.Type != gjson.String {
		return ""
	}
	return strings.Clone(r.Str)
}

// jsonView returns b as a string without copying, so gjson can read event
// data without an allocation per lookup. The string must not outlive b's
// contents: every value kept past the event goes through cloneStr or a copy.
func jsonView(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// jsonBytes returns the bytes of the JSON value r, found in data, without
// copying.
func jsonBytes(data []byte, r gjson.Result) []byte {
	end := r.Index + len(r.Raw)
	if r.Index > 0 && end <= len(data) && jsonView(data[r.Index:end]) == r.Raw {
		return data[r.Index:end:end]
	}
	return []byte(r.Raw) // gjson did not know the position: copy
}

// jsonMember is one member of a JSON object: its key, unescaped, and its
// raw value at offset off of the text scanned.
type jsonMember struct {
	key string
	val string
	off int
}

// firstMember keeps the first of duplicate keys, as gjson does.
func firstMember(cur, m jsonMember) jsonMember {
	if cur.key != "" {
		return cur
	}
	return m
}

// objectStart returns the offset just past the opening brace of the JSON
// object s, or len(s) when s is not an object.
func objectStart(s string) int {
	i := skipSpace(s, 0)
	if i < len(s) && s[i] == '{' {
		return i + 1
	}
	return len(s)
}

// nextMember reads the member of the object s that starts at offset i, in
// text already validated as JSON, and returns the offset of the member after
// it. ok is false past the last member.
func nextMember(s string, i int) (m jsonMember, next int, ok bool) {
	i = skipSpace(s, i)
	if i >= len(s) || s[i] != '"' {
		return m, len(s), false
	}
	end := stringEnd(s, i)
	if end < 0 {
		return m, len(s), false
	}
	m.key = jsonStringValue(s[i:end])
	i = skipSpace(s, end)
	if i >= len(s) || s[i] != ':' {
		return m, len(s), false
	}
	i = skipSpace(s, i+1)
	end = valueEnd(s, i)
	if end < 0 {
		return m, len(s), false
	}
	m.val, m.off = s[i:end], i
	i = skipSpace(s, end)
	if i < len(s) && s[i] == ',' {
		i++
	}
	return m, i, true
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the offset just past the JSON string starting at
// s[i] == '"', or -1.
func stringEnd(s string, i int) int {
	for j := i + 1; ; {
		k := strings.IndexByte(s[j:], '"')
		if k < 0 {
			return -1
		}
		q := j + k
		n := 0
		for p := q - 1; p > i && s[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
}

// valueEnd returns the offset just past the JSON value starting at s[i],
// or -1.
func valueEnd(s string, i int) int {
	if i >= len(s) {
		return -1
	}
	switch s[i] {
	case '"':
		return stringEnd(s, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(s); j++ {
			switch s[j] {
			case '"':
				e := stringEnd(s, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(s) && s[j] != ',' && s[j] != '}' && s[j] != ']' && s[j] > ' ' {
		j++
	}
	return j
}

func isJSONString(raw string) bool { return len(raw) >= 2 && raw[0] == '"' }

// jsonStringValue decodes the JSON string literal raw; it allocates only
// when raw holds escapes.
func jsonStringValue(raw string) string {
	if strings.IndexByte(raw, '\\') < 0 {
		return raw[1 : len(raw)-1]
	}
	return string(appendJSONString(nil, raw))
}

// appendJSONString appends the decoded value of the JSON string literal lit
// (quotes included, already validated) to dst. It exists so that argument
// fragments are decoded straight into the call's buffer, with no string
// allocated per fragment.
func appendJSONString(dst []byte, lit string) []byte {
	s := lit[1 : len(lit)-1]
	for {
		i := strings.IndexByte(s, '\\')
		if i < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		s = s[i:]
		if len(s) < 2 {
			return dst // cannot happen in validated JSON
		}
		c := s[1]
		s = s[2:]
		switch c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, rest := hex4(s)
			s = rest
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if len(s) >= 6 && s[0] == '\\' && s[1] == 'u' {
					r2, _ = hex4(s[2:])
				}
				if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
					r = dec
					s = s[6:]
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, c)
		}
	}
}

// hex4 reads the four hex digits of a \u escape.
func hex4(s string) (rune, string) {
	if len(s) < 4 {
		return utf8.RuneError, ""
	}
	var r rune
	for i := range 4 {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return utf8.RuneError, s[4:]
		}
		r = r<<4 | rune(c)
	}
	return r, s[4:]
}
