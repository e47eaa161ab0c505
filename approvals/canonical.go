package approvals

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Call is a tool call in canonical form: Input is the arguments as canonical
// JSON (objects' keys sorted, no insignificant whitespace, numbers as
// written), so two spellings of one call have one digest and an approval
// covers exactly the call that was shown.
type Call struct {
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// MaxDepth bounds the nesting of a call's arguments: deeper input is refused
// rather than walked, since it comes from the model.
const MaxDepth = 64

// Canonical returns the canonical form of a call to name with args, the raw
// JSON arguments as the model sent them. Empty args (a call without
// arguments) read as {}. It returns an error wrapping ErrInvalidArgs when
// args is not one JSON value, nests deeper than MaxDepth, or repeats a key in
// an object: with duplicate keys the gate and the tool could read different
// values, so such a call is never canonical. Keys equal under Unicode
// simple case folding (command and Command) are duplicates too, and the
// error then also wraps ErrRepeatedKey: a tool decoding its input with Go's
// encoding/json matches keys that way, and runs the last.
func Canonical(name string, args []byte) (Call, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		return Call{Name: name, Input: json.RawMessage("{}")}, nil
	}
	if !utf8.Valid(args) {
		return Call{}, fmt.Errorf("%w: invalid UTF-8", ErrInvalidArgs)
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var out []byte
	out, err := canonicalValue(dec, out, 0)
	if err != nil {
		return Call{}, fmt.Errorf("%w: %w", ErrInvalidArgs, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Call{}, fmt.Errorf("%w: data after the value", ErrInvalidArgs)
	}
	return Call{Name: name, Input: out}, nil
}

// Digest returns "sha256:" and the hex SHA-256 of the canonical
// {"input":...,"name":...}: what an approver saw is what is released.
func (c Call) Digest() string {
	b := make([]byte, 0, len(c.Input)+len(c.Name)+24)
	b = append(b, `{"input":`...)
	b = append(b, c.Input...)
	b = append(b, `,"name":`...)
	b = appendString(b, c.Name)
	b = append(b, '}')
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Value returns the arguments as Go values (maps, slices, strings, float64,
// bool, nil), the form a gate's condition sees as tool.input.
func (c Call) Value() (any, error) {
	var v any
	if err := json.Unmarshal(c.Input, &v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgs, err)
	}
	return v, nil
}

func canonicalValue(dec *json.Decoder, out []byte, depth int) ([]byte, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("nested deeper than %d", MaxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return canonicalObject(dec, out, depth)
		case '[':
			return canonicalArray(dec, out, depth)
		}
		return nil, fmt.Errorf("unexpected %q", rune(t))
	case string:
		return appendString(out, t), nil
	case json.Number:
		return append(out, t...), nil
	case bool:
		return strconv.AppendBool(out, t), nil
	case nil:
		return append(out, "null"...), nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

func canonicalObject(dec *json.Decoder, out []byte, depth int) ([]byte, error) {
	type member struct {
		key   string
		value []byte
	}
	var members []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("object key is not a string")
		}
		value, err := canonicalValue(dec, nil, depth+1)
		if err != nil {
			return nil, err
		}
		members = append(members, member{key, value})
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, err
	}
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	if len(members) > 1 {
		folded := make(map[string]string, len(members))
		for _, m := range members {
			f := foldKey(m.key)
			if prev, dup := folded[f]; dup {
				return nil, fmt.Errorf("%w: %q and %q", ErrRepeatedKey, prev, m.key)
			}
			folded[f] = m.key
		}
	}
	out = append(out, '{')
	for i, m := range members {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendString(out, m.key)
		out = append(out, ':')
		out = append(out, m.value...)
	}
	return append(out, '}'), nil
}

func canonicalArray(dec *json.Decoder, out []byte, depth int) ([]byte, error) {
	out = append(out, '[')
	for i := 0; dec.More(); i++ {
		if i > 0 {
			out = append(out, ',')
		}
		var err error
		if out, err = canonicalValue(dec, out, depth+1); err != nil {
			return nil, err
		}
	}
	if _, err := dec.Token(); err != nil { // ']'
		return nil, err
	}
	return append(out, ']'), nil
}

// foldKey is key with each rune folded to the smallest of its simple
// folding orbit, as encoding/json folds names: keys equal under
// strings.EqualFold have one foldKey.
func foldKey(key string) string {
	b := make([]byte, 0, len(key))
	for _, r := range key {
		for {
			r2 := unicode.SimpleFold(r)
			if r2 <= r {
				r = r2
				break
			}
			r = r2
		}
		b = utf8.AppendRune(b, r)
	}
	return string(b)
}

// appendString writes s as a JSON string with the minimal escapes: quote,
// backslash and control characters. Everything else stays as UTF-8, so the
// canonical form does not depend on how the model chose to escape.
func appendString(out []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	out = append(out, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			out = append(out, '\\', c)
		case c == '\n':
			out = append(out, '\\', 'n')
		case c == '\r':
			out = append(out, '\\', 'r')
		case c == '\t':
			out = append(out, '\\', 't')
		case c < 0x20:
			out = append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			out = append(out, c)
		}
	}
	return append(out, '"')
}
