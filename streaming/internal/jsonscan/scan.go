package jsonscan

import (
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
)

// Reading JSON in place: the one scanner behind the Anthropic decoder's hot
// path and ParseRequest.
//
// gjson decodes every string it returns, allocating a copy when the string
// holds escapes, and system prompts, tool outputs and argument fragments are
// full of them. The walkers below return raw member and element text
// instead, as substrings of the text scanned, and strings are decoded only
// where a value is needed, into a buffer the caller owns. They are meant for
// text gjson.Valid accepted, and agree with gjson and encoding/json there;
// on any other input they still end and never index out of range, so a
// caller may walk before it validates. gjson decodes the short values
// (numbers, ids, names) and the rare deep paths.
//
// Event data lives in the Reader's buffer only for one Decode call, and the
// proxy reuses a request body once ParseRequest returns: whatever these
// helpers return is a view, to be copied by the callers that keep it.

// View returns b as a string without copying, so that JSON can be read
// without an allocation per lookup. The string must not outlive b's
// contents.
func View(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// CloneString copies a string value out of the text gjson read, or returns ""
// when r is not a string.
func CloneString(r gjson.Result) string {
	if r.Type != gjson.String {
		return ""
	}
	return strings.Clone(r.Str)
}

// Bytes returns the bytes of the JSON value r, found in data, without
// copying.
func Bytes(data []byte, r gjson.Result) []byte {
	end := r.Index + len(r.Raw)
	if r.Index > 0 && end <= len(data) && View(data[r.Index:end]) == r.Raw {
		return data[r.Index:end:end]
	}
	return []byte(r.Raw) // gjson did not know the position: copy
}

// Member is one member of a JSON object: its key as written (quotes
// removed, escapes kept), its raw value at offset off of the object's text,
// and how deeply that value nests.
type Member struct {
	Key   string
	Val   string
	Off   int
	Depth int
}

// name is the member's key decoded; it allocates only when the key holds
// escapes.
func (m Member) Name() string {
	if strings.IndexByte(m.Key, '\\') < 0 {
		return m.Key
	}
	return Unquote(m.Key)
}

// FirstMember keeps the first of duplicate keys, as gjson does. A member
// found always has a value, so an empty one means none yet.
func FirstMember(cur, m Member) Member {
	if cur.Val != "" {
		return cur
	}
	return m
}

// ObjectStart returns the offset just past the opening brace of the JSON
// object s, or len(s) when s is not an object.
func ObjectStart(s string) int {
	i := SkipSpace(s, 0)
	if i < len(s) && s[i] == '{' {
		return i + 1
	}
	return len(s)
}

// NextMember reads the member of the object text s that starts at offset i
// (just past the opening brace or the previous member) and returns the
// offset where the one after it starts. ok is false past the last member;
// next is then the offset of the closing brace, or len(s) when the text
// ends or breaks off before one. Every member read consumes input, so a
// walk ends within len(s) steps.
//
// The hot path of the Anthropic decoder walks with it directly: a walk
// kept in locals runs measurably faster than one kept in an ObjectIter.
func NextMember(s string, i int) (m Member, next int, ok bool) {
	i = SkipSpace(s, i)
	if i < len(s) && s[i] == ',' {
		i = SkipSpace(s, i+1)
	}
	if i < len(s) && s[i] == '}' {
		return m, i, false
	}
	if i >= len(s) || s[i] != '"' {
		return m, len(s), false
	}
	ke := SkipString(s, i)
	if ke-1 <= i || s[ke-1] != '"' {
		return m, len(s), false
	}
	m.Key = s[i+1 : ke-1]
	i = SkipSpace(s, ke)
	if i >= len(s) || s[i] != ':' {
		return m, len(s), false
	}
	i = SkipSpace(s, i+1)
	ve, depth := SkipValueDepth(s, i)
	if ve == i {
		return m, len(s), false
	}
	m.Val, m.Off, m.Depth = s[i:ve], i, depth
	return m, ve, true
}

// ObjectIter walks the members of a JSON object with NextMember; on
// anything else it yields nothing.
type ObjectIter struct {
	s      string
	i      int
	Closed bool // the object's closing brace was reached
	Depth  int  // deepest nesting seen inside the values walked
}

func NewObjectIter(obj string) ObjectIter {
	return ObjectIter{s: obj, i: ObjectStart(obj)}
}

// next returns the next member; ok is false past the last one.
func (it *ObjectIter) Next() (Member, bool) {
	m, next, ok := NextMember(it.s, it.i)
	switch {
	case ok:
		it.i, it.Depth = next, max(it.Depth, m.Depth)
	case next < len(it.s):
		it.i, it.Closed = next+1, true
	default:
		it.i = len(it.s)
	}
	return m, ok
}

// Offset is where the walk stands in the object's text: past the closing
// brace once Closed is set.
func (it *ObjectIter) Offset() int { return it.i }

// ArrayIter walks the elements of a JSON array; on anything else it
// yields nothing.
type ArrayIter struct {
	s string
	i int
}

func NewArrayIter(arr string) ArrayIter {
	i := SkipSpace(arr, 0)
	if i == len(arr) || arr[i] != '[' {
		return ArrayIter{s: arr, i: len(arr)}
	}
	return ArrayIter{s: arr, i: i + 1}
}

func (it *ArrayIter) Next() (string, bool) {
	s := it.s
	i := SkipSpace(s, it.i)
	if i < len(s) && s[i] == ',' {
		i = SkipSpace(s, i+1)
	}
	if i >= len(s) || s[i] == ']' {
		it.i = len(s)
		return "", false
	}
	e := SkipValue(s, i)
	if e == i {
		it.i = len(s)
		return "", false
	}
	it.i = e
	return s[i:e], true
}

// ReadObject returns the raw values of up to four keys of obj, in the
// order of keys, "" for those absent, walking obj once and no further than
// the last key found. The first occurrence of a key wins, as with gjson.
func ReadObject(obj string, keys ...string) [4]string {
	var out [4]string
	var seen [4]bool
	keys = keys[:min(len(keys), len(out))]
	it := NewObjectIter(obj)
	for n, found := 0, 0; n < len(obj) && found < len(keys); n++ {
		m, ok := it.Next()
		if !ok {
			break
		}
		for j, want := range keys {
			if !seen[j] && KeyEqual(m.Key, want) {
				out[j], seen[j] = m.Val, true
				found++
			}
		}
	}
	return out
}

// MemberRaw is the raw value of obj's first member named key, "" if none.
func MemberRaw(obj, key string) string {
	it := NewObjectIter(obj)
	for n := 0; n < len(obj); n++ {
		m, ok := it.Next()
		if !ok {
			break
		}
		if KeyEqual(m.Key, key) {
			return m.Val
		}
	}
	return ""
}

// KeyEqual reports whether the key raw, as written, decodes to want.
func KeyEqual(raw, want string) bool {
	if strings.IndexByte(raw, '\\') < 0 {
		return raw == want
	}
	return Unquote(raw) == want
}

func SkipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// SkipString returns the offset just past the string literal that starts
// at s[i] (a quote), or len(s) when it never ends.
func SkipString(s string, i int) int {
	start := i + 1
	for i = start; i < len(s); {
		j := strings.IndexByte(s[i:], '"')
		if j < 0 {
			return len(s)
		}
		i += j
		k := i
		for k > start && s[k-1] == '\\' {
			k--
		}
		if (i-k)%2 == 0 { // not escaped
			return i + 1
		}
		i++
	}
	return len(s)
}

// SkipValue returns the offset just past the value that starts at s[i].
func SkipValue(s string, i int) int {
	end, _ := SkipValueDepth(s, i)
	return end
}

// SkipValueDepth is SkipValue that also returns how deeply the value nests
// (0 for a string, number or literal).
func SkipValueDepth(s string, i int) (end, depth int) {
	if i >= len(s) {
		return len(s), 0
	}
	switch s[i] {
	case '"':
		return SkipString(s, i), 0
	case '{', '[':
		d := 0
		for i < len(s) {
			switch s[i] {
			case '"':
				i = SkipString(s, i)
				continue
			case '{', '[':
				d++
				depth = max(depth, d)
			case '}', ']':
				d--
				if d == 0 {
					return i + 1, depth
				}
			}
			i++
		}
		return len(s), depth
	}
	// A literal or number. Stopping at any other byte keeps brackets glued
	// to a literal out of the value, so that no bracket goes uncounted.
	for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z' ||
		s[i] >= '0' && s[i] <= '9' || s[i] == '-' || s[i] == '+' || s[i] == '.') {
		i++
	}
	return i, 0
}

// NestingWithin reports whether no array or object in s (outside string
// literals) nests deeper than limit.
func NestingWithin(s string, limit int) bool {
	depth := 0
	for i := 0; i < len(s); {
		switch s[i] {
		case '"':
			i = SkipString(s, i)
			continue
		case '{', '[':
			depth++
			if depth > limit {
				return false
			}
		case '}', ']':
			depth--
		}
		i++
	}
	return true
}

// Raw value tests. raw is a member or element as the walkers return it.

func IsStringRaw(raw string) bool {
	return len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"'
}

func IsObject(raw string) bool { return len(raw) > 0 && raw[0] == '{' }

func IsNumber(raw string) bool {
	return len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9')
}

// IsStringValue reports whether raw is a non-empty JSON string.
func IsStringValue(raw string) bool { return IsStringRaw(raw) && len(raw) > 2 }

// IsString reports whether raw is the JSON string want.
func IsString(raw, want string) bool {
	v, ok := StringValue(raw)
	return ok && v == want
}

// Strings.

// StringValue decodes raw when it is a JSON string. Without escapes the
// result is a substring of raw: copy it before keeping it.
func StringValue(raw string) (string, bool) {
	if !IsStringRaw(raw) {
		return "", false
	}
	s := raw[1 : len(raw)-1]
	if strings.IndexByte(s, '\\') < 0 {
		return s, true
	}
	return Unquote(s), true
}

// Unquote decodes the body of a JSON string literal (quotes removed).
func Unquote(s string) string {
	d, _ := UnquoteInto(make([]byte, 0, len(s)+2*utf8.UTFMax), s, 0)
	return string(d)
}

// AppendDecoded appends the decoded value of the JSON string literal lit
// (quotes included) to dst, or nothing when lit is not one. It lets
// argument fragments decode straight into the call's buffer, with no
// string allocated per fragment.
func AppendDecoded(dst []byte, lit string) []byte {
	if !IsStringRaw(lit) {
		return dst
	}
	s := lit[1 : len(lit)-1]
	if strings.IndexByte(s, '\\') < 0 {
		return append(dst, s...)
	}
	// Decoded text is never longer than s, so with this much room one pass
	// decodes all of it.
	d, _ := UnquoteInto(slices.Grow(dst, len(s)+2*utf8.UTFMax), s, 0)
	return d
}

// HasPrefixDecoded reports whether the JSON string raw decodes to a text
// starting with prefix (len(prefix) < 56).
func HasPrefixDecoded(raw, prefix string) bool {
	if !IsStringRaw(raw) {
		return false
	}
	var buf [64]byte
	d, _ := UnquoteInto(buf[:0], raw[1:len(raw)-1], 0)
	return len(d) >= len(prefix) && string(d[:len(prefix)]) == prefix
}

// UnquoteInto decodes s, the body of a JSON string literal, from s[i],
// appending to dst while dst has room, and returns dst and the offset
// where it stopped. Escapes decode as encoding/json does (a lone surrogate
// becomes U+FFFD); a malformed escape is kept as written. It makes progress
// whenever dst has room for 2*utf8.UTFMax bytes, and the text it appends is
// never longer than the text it consumes.
func UnquoteInto(dst []byte, s string, i int) ([]byte, int) {
	for i < len(s) {
		room := cap(dst) - len(dst)
		if s[i] != '\\' {
			j := strings.IndexByte(s[i:], '\\')
			if j < 0 {
				j = len(s) - i
			}
			j = min(j, room)
			if j == 0 {
				return dst, i
			}
			dst = append(dst, s[i:i+j]...)
			i += j
			continue
		}
		if room < 2*utf8.UTFMax {
			return dst, i
		}
		if i+1 == len(s) {
			return append(dst, '\\'), i + 1
		}
		switch c := s[i+1]; c {
		case '"', '\\', '/':
			dst, i = append(dst, c), i+2
		case 'b':
			dst, i = append(dst, '\b'), i+2
		case 'f':
			dst, i = append(dst, '\f'), i+2
		case 'n':
			dst, i = append(dst, '\n'), i+2
		case 'r':
			dst, i = append(dst, '\r'), i+2
		case 't':
			dst, i = append(dst, '\t'), i+2
		case 'u':
			r, n := decodeU(s[i:])
			if n == 0 {
				dst, i = append(dst, '\\'), i+1
				break
			}
			dst, i = utf8.AppendRune(dst, r), i+n
		default:
			dst, i = append(dst, '\\'), i+1
		}
	}
	return dst, i
}

// decodeU decodes the \uXXXX escape (or surrogate pair) at the start of s
// and returns the rune and the bytes it used, 0 when malformed.
func decodeU(s string) (rune, int) {
	r, ok := uEscape(s)
	if !ok {
		return 0, 0
	}
	if r < 0xD800 || r > 0xDFFF {
		return r, 6
	}
	if r < 0xDC00 {
		if lo, ok := uEscape(s[6:]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
			return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), 12
		}
	}
	return utf8.RuneError, 6
}

// uEscape reads "\uXXXX" at the start of s.
func uEscape(s string) (rune, bool) {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[2:6]) {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// MaxNesting bounds how deeply a request body may nest. gjson validates
// recursively: a few megabytes of '[' would take seconds and a huge stack.
// encoding/json stops at the same depth.
const MaxNesting = 10000

// ObjectProblem says why s is not one valid JSON object nested no deeper
// than MaxNesting, "" when it is. depth is how deeply s nests when already
// known, else 0.
func ObjectProblem(s string, depth int) string {
	i := SkipSpace(s, 0)
	if i == len(s) || s[i] != '{' {
		return "is not a JSON object"
	}
	if depth > MaxNesting || depth == 0 && !NestingWithin(s, MaxNesting) {
		return "nests deeper than " + strconv.Itoa(MaxNesting) + " levels"
	}
	if !gjson.Valid(s) {
		return "is not valid JSON"
	}
	return ""
}
