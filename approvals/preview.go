package approvals

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// What approvers are shown of a call. A call is never cut silently: a view
// too long for its place keeps its head and its tail and says how many
// characters it leaves out, and every character that does not show itself
// (bidirectional controls, zero-width and other format characters, control
// characters) is written as an escape, so text cannot hide or reorder what
// an approver reads.

// Visible returns s with every invisible character written as an escape:
// \n, \r and \t for those, \uXXXX for the other characters of the Basic
// Multilingual Plane and \UXXXXXXXX beyond it, and \xNN for a byte that is
// not UTF-8. Every other character is kept as it is.
func Visible(s string) string {
	if !hasInvisible(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case Invisible(r):
			b.WriteString(escapeRune(r))
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// CountInvisible returns how many characters Visible would escape in s.
func CountInvisible(s string) int {
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || Invisible(r) {
			n++
		}
		i += size
	}
	return n
}

func hasInvisible(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c >= 0x80 {
			return CountInvisible(s) > 0
		}
	}
	return false
}

func escapeRune(r rune) string {
	switch r {
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	}
	if r > 0xffff {
		return fmt.Sprintf(`\U%08x`, r)
	}
	return fmt.Sprintf(`\u%04x`, r)
}

// Invisible reports whether r is a character a reader cannot see as
// itself: a control (Cc) or format (Cf) character — among them the
// bidirectional embeddings, overrides and isolates U+202A–U+202E and
// U+2066–U+2069, the marks U+200E–U+200F, the zero-width U+200B–U+200D,
// U+2060 and U+FEFF, and the tag characters U+E0000–U+E007F —, a line or
// paragraph separator, a space other than U+0020, a variation selector, a
// private-use or unassigned code point, or one of the blank fillers.
func Invisible(r rune) bool {
	switch {
	case r == ' ':
		return false
	case r < 0x20, r >= 0x7f && r < 0xa0:
		return true
	case r < 0x7f:
		return false
	}
	switch r {
	case 0x034f, // combining grapheme joiner
		0x115f, 0x1160, 0x3164, 0xffa0, // Hangul fillers
		0x2800, // braille pattern blank
		0xfffc: // object replacement character
		return true
	}
	if r >= 0xfe00 && r <= 0xfe0f || r >= 0xe0100 && r <= 0xe01ef { // variation selectors
		return true
	}
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Zl, unicode.Zp, unicode.Zs) ||
		!unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S)
}

// elision is the mark that stands for the middle of a text left out.
func elision(n int) string {
	return " …[" + groupDigits(n) + " characters elided]… "
}

// groupDigits writes n with thousands separators: 4,512.
func groupDigits(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return s
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Excerpt returns Visible(s) when it has at most limit characters, else
// its head and its tail around an elision mark stating how many characters
// of s are left out, in at most limit characters all told. width says how
// wide a piece of text is where it will be shown (nil: its characters), so
// a caller that escapes the text further can budget for the escapes.
func Excerpt(s string, limit int, width func(string) int) string {
	if width == nil {
		width = utf8.RuneCountInString
	}
	if v := Visible(s); width(v) <= limit {
		return v
	}
	runes := []rune(s)
	mark := elision(len(runes))
	budget := limit - width(mark)
	if budget < 2 {
		return strings.TrimSpace(mark)
	}
	// The head gets half the room, the tail the rest; each takes whole
	// characters, escaped, while they fit.
	var head, tail strings.Builder
	used, h := 0, 0
	for ; h < len(runes); h++ {
		piece := Visible(string(runes[h]))
		w := width(piece)
		if used+w > budget/2 {
			break
		}
		head.WriteString(piece)
		used += w
	}
	var pieces []string
	t := len(runes)
	for t > h {
		piece := Visible(string(runes[t-1]))
		w := width(piece)
		if used+w > budget {
			break
		}
		pieces = append(pieces, piece)
		used += w
		t--
	}
	for i := len(pieces) - 1; i >= 0; i-- {
		tail.WriteString(pieces[i])
	}
	return head.String() + elision(t-h) + tail.String()
}
