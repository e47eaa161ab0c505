package wire

import (
	"errors"
	"strings"
)

// ErrPathAmbiguous: a path whose meaning depends on how the provider would
// normalise it. Such a path is refused, never guessed at.
var ErrPathAmbiguous = errors.New("wire: path cannot be canonicalised unambiguously")

// CanonicalPath is the one spelling of an agent's escaped path that
// gatekeeper classifies and forwards: every percent-escape decoded once and
// each segment escaped again the same way (unreserved characters and
// ":@!$&'()*+,=" as they are, every other byte as uppercase %XX), the
// trailing slash trimmed. A path with an escaped '/' or '\', a dot segment
// (or ".." anywhere in a segment), an empty segment, a control byte or a
// broken escape is refused with ErrPathAmbiguous: a provider may read it
// as another path than gatekeeper did. "" and "/" are "/".
func CanonicalPath(escaped string) (string, error) {
	if escaped == "" || escaped == "/" {
		return "/", nil
	}
	if escaped[0] != '/' {
		return "", ErrPathAmbiguous
	}
	p := strings.TrimSuffix(escaped[1:], "/")
	var b strings.Builder
	b.Grow(len(escaped))
	for seg := range strings.SplitSeq(p, "/") {
		dec, err := unescapeSegment(seg)
		if err != nil {
			return "", err
		}
		if dec == "" || dec == "." || strings.Contains(dec, "..") {
			return "", ErrPathAmbiguous
		}
		b.WriteByte('/')
		escapeSegment(&b, dec)
	}
	return b.String(), nil
}

// unescapeSegment decodes the percent-escapes of one segment. A decoded
// byte that would change where segments end, or that no path carries
// (control bytes, '\', which some servers take for '/'), is refused.
func unescapeSegment(seg string) (string, error) {
	if !strings.ContainsAny(seg, "%\\") && !hasControl(seg) {
		return seg, nil
	}
	out := make([]byte, 0, len(seg))
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c == '%' {
			if i+2 >= len(seg) {
				return "", ErrPathAmbiguous
			}
			hi, ok1 := unhex(seg[i+1])
			lo, ok2 := unhex(seg[i+2])
			if !ok1 || !ok2 {
				return "", ErrPathAmbiguous
			}
			c = hi<<4 | lo
			i += 2
		}
		if c == '/' || c == '\\' || c < 0x20 || c == 0x7f {
			return "", ErrPathAmbiguous
		}
		out = append(out, c)
	}
	return string(out), nil
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// escapeSegment writes a decoded segment in canonical escaping.
func escapeSegment(b *strings.Builder, seg string) {
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if segmentByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
}

// segmentByte reports whether c stays as it is in a canonical segment:
// RFC 3986's unreserved characters, ':' and '@', and the sub-delimiters
// but ';' (which some servers read as the start of path parameters).
func segmentByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~:@!$&'()*+,=", c) >= 0
}

// ProviderRest is the escaped path below provider name's segment of
// escaped, the path of a request routed to /{name}/... or
// /t/{tid}/{name}/...; false when no segment names the provider.
func ProviderRest(escaped, tid, name string) (string, bool) {
	prefix := "/" + name
	if tid != "" {
		prefix = "/t/" + tid + "/" + name
	}
	if !strings.HasPrefix(escaped, prefix) {
		// The trajectory segment was escaped differently; find the provider segment.
		i := strings.Index(escaped, "/"+name)
		if i < 0 {
			return "", false
		}
		prefix = escaped[:i+len(name)+1]
	}
	return strings.TrimPrefix(escaped, prefix), true
}
