package jsonscan

import (
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Repeated members: one reading for every reader.
//
// gjson, and so every reader here, takes the first of two members with
// the same key; the JSON parsers of JavaScript and Python keep the last;
// Go's encoding/json also matches keys case-insensitively (Unicode simple
// folding), keeping the last of them. Text whose objects repeat a key, as
// any of them reads keys, is read differently by gatekeeper and an agent.
// Repeats finds such text without allocating on text that has none (every
// well-formed reply); Unrepeat rewrites it into text every reader reads
// alike.

// maxRepeatKeys is how many keys of one object Repeats compares pairwise
// in a stack array; an object with more is checked through a map.
const maxRepeatKeys = 32

// Repeats reports whether an object anywhere in the JSON text s repeats a
// key: two keys whose decoded text is equal under Unicode simple case
// folding (as strings.EqualFold, which is how encoding/json matches a
// key). s is text gjson.Valid accepted; on anything else it still ends.
// Text nested deeper than MaxNesting counts as repeating: it is not
// walked.
func Repeats(s string) bool {
	return repeatsValue(s, 0, 0)
}

func repeatsValue(s string, i, depth int) bool {
	i = SkipSpace(s, i)
	if i >= len(s) {
		return false
	}
	switch s[i] {
	case '{':
		if depth >= MaxNesting {
			return true
		}
		return repeatsObject(s[i:SkipValue(s, i)], depth+1)
	case '[':
		if depth >= MaxNesting {
			return true
		}
		it := NewArrayIter(s[i:SkipValue(s, i)])
		for n := 0; n < len(s); n++ {
			el, ok := it.Next()
			if !ok {
				break
			}
			if el[0] == '{' || el[0] == '[' {
				if repeatsValue(el, 0, depth+1) {
					return true
				}
			}
		}
	}
	return false
}

func repeatsObject(obj string, depth int) bool {
	var stack [maxRepeatKeys]string
	keys := stack[:0]
	var many map[string]struct{}
	for m, next, ok := NextMember(obj, ObjectStart(obj)); ok; m, next, ok = NextMember(obj, next) {
		if many != nil {
			k := FoldKey(m.Key)
			if _, dup := many[k]; dup {
				return true
			}
			many[k] = struct{}{}
		} else {
			for _, k := range keys {
				if keyFoldEqual(k, m.Key) {
					return true
				}
			}
			if len(keys) < len(stack) {
				keys = append(keys, m.Key)
			} else {
				// A reply's objects have a few dozen members at most: an
				// object this wide is checked the slow way.
				many = make(map[string]struct{}, 2*len(keys))
				for _, k := range keys {
					many[FoldKey(k)] = struct{}{}
				}
				many[FoldKey(m.Key)] = struct{}{}
			}
		}
		if v := m.Val; v[0] == '{' || v[0] == '[' {
			if repeatsValue(v, 0, depth) {
				return true
			}
		}
	}
	return false
}

// keyFoldEqual reports whether two keys, as written, decode to texts equal
// under simple case folding.
func keyFoldEqual(a, b string) bool {
	if strings.IndexByte(a, '\\') < 0 && strings.IndexByte(b, '\\') < 0 {
		return strings.EqualFold(a, b)
	}
	return strings.EqualFold(Unquote(a), Unquote(b))
}

// FoldKey is the key raw, as written, decoded and folded (Fold): two keys
// are equal under simple case folding exactly when their FoldKeys are
// equal.
func FoldKey(raw string) string {
	if strings.IndexByte(raw, '\\') >= 0 {
		return Fold(Unquote(raw))
	}
	return Fold(raw)
}

// Fold is s with each rune folded to the smallest rune of its simple
// folding orbit, as encoding/json folds names: strings equal under
// strings.EqualFold have one Fold.
func Fold(s string) string {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		b = utf8.AppendRune(b, foldRune(r))
	}
	return string(b)
}

// foldRune is the smallest rune of r's simple folding orbit.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

// Unrepeat appends to dst the JSON text s (a value gjson.Valid accepted)
// with no object repeating a key, in the one reading gatekeeper and the
// agent then share. Of the members of an object whose keys are equal
// under folding, one is kept, at the place of the first, with the key of
// the last:
//
//   - when every value is an object, their members together, in order,
//     read again by these rules (so that no count of a repeated usage
//     object is lost, and a block's last type is the one read);
//   - when every value is a number, the largest (a usage count read
//     twice is charged at its larger reading);
//   - otherwise the last value, as JavaScript and Python read it.
//
// Nesting deeper than MaxNesting is cut to null. It allocates: it runs
// only on text Repeats found repeating.
func Unrepeat(dst []byte, s string) []byte {
	return unrepeatValue(dst, s, 0)
}

func unrepeatValue(dst []byte, s string, depth int) []byte {
	s = strings.TrimSpace(s)
	if s == "" {
		return append(dst, "null"...)
	}
	switch s[0] {
	case '{':
		if depth >= MaxNesting {
			return append(dst, "null"...)
		}
		return unrepeatObject(dst, []string{s}, depth+1)
	case '[':
		if depth >= MaxNesting {
			return append(dst, "null"...)
		}
		dst = append(dst, '[')
		it := NewArrayIter(s)
		for n := 0; n < len(s); n++ {
			el, ok := it.Next()
			if !ok {
				break
			}
			if n > 0 {
				dst = append(dst, ',')
			}
			dst = unrepeatValue(dst, el, depth+1)
		}
		return append(dst, ']')
	}
	return append(dst, s...)
}

// unrepeatObject writes the members of the objects objs, taken together,
// as one object without repeated keys.
func unrepeatObject(dst []byte, objs []string, depth int) []byte {
	type group struct {
		key  string   // the last key as written
		vals []string // every value, in order
	}
	var groups []group
	at := map[string]int{}
	for _, obj := range objs {
		for m, next, ok := NextMember(obj, ObjectStart(obj)); ok; m, next, ok = NextMember(obj, next) {
			k := FoldKey(m.Key)
			g, seen := at[k]
			if !seen {
				g = len(groups)
				at[k] = g
				groups = append(groups, group{})
			}
			groups[g].key = m.Key
			groups[g].vals = append(groups[g].vals, m.Val)
		}
	}
	dst = append(dst, '{')
	for i, g := range groups {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(append(append(dst, '"'), g.key...), '"', ':')
		switch {
		case len(g.vals) > 1 && allOf(g.vals, IsObject):
			dst = unrepeatObject(dst, g.vals, depth+1)
		case len(g.vals) > 1 && allOf(g.vals, IsNumber):
			dst = append(dst, largest(g.vals)...)
		default:
			dst = unrepeatValue(dst, g.vals[len(g.vals)-1], depth)
		}
	}
	return append(dst, '}')
}

func allOf(vals []string, is func(string) bool) bool {
	return !slices.ContainsFunc(vals, func(v string) bool { return !is(v) })
}

// largest is the largest of the JSON numbers nums, the last of equal ones.
func largest(nums []string) string {
	best, bestV := "", 0.0
	for _, n := range nums {
		// Out of range, v is ±Inf: still ordered.
		v, _ := strconv.ParseFloat(n, 64)
		if best == "" || v >= bestV {
			best, bestV = n, v
		}
	}
	return best
}
