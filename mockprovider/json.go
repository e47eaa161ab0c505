package mockprovider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// obj is a JSON object whose keys keep their order. The providers' payloads
// have a stable field order that clients and proxies end up depending on,
// so replies are built field by field instead of from maps or structs.
type obj []kv

type kv struct {
	k string
	v any
}

// raw is JSON text inserted verbatim.
type raw []byte

func (o obj) set(k string, v any) obj { return append(o, kv{k, v}) }

func (o obj) MarshalJSON() ([]byte, error) { return appendJSON(nil, o), nil }

// appendJSON encodes v without escaping <, > and &: the providers send
// them literally and SDKs compare against that.
func appendJSON(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...)
	case obj:
		b = append(b, '{')
		for i, f := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, f.k)
			b = append(b, ':')
			b = appendJSON(b, f.v)
		}
		return append(b, '}')
	case []obj:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSON(b, e)
		}
		return append(b, ']')
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSON(b, e)
		}
		return append(b, ']')
	case string:
		return appendString(b, v)
	case int:
		return strconv.AppendInt(b, int64(v), 10)
	case int64:
		return strconv.AppendInt(b, v, 10)
	case float64:
		return strconv.AppendFloat(b, v, 'f', -1, 64)
	case bool:
		return strconv.AppendBool(b, v)
	case raw:
		return append(b, v...)
	case json.RawMessage:
		return append(b, v...)
	default:
		// Only values built in this package reach here; a new type is a
		// programming error that tests catch immediately.
		panic(fmt.Sprintf("mockprovider: cannot encode %T", v))
	}
}

const hexDigits = "0123456789abcdef"

// appendString encodes s as a JSON string the way encoding/json does with
// HTML escaping off: invalid UTF-8 becomes U+FFFD, U+2028/9 are escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// compactRaw is JSON text from a request, without insignificant white
// space, ready to be embedded in an event's single data line.
func compactRaw(s string) raw {
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		// The request body was validated as JSON, so its parts are too.
		return raw("null")
	}
	return raw(buf.Bytes())
}
