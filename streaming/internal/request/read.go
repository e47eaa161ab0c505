package request

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
)

// CheckObject reports whether s is one valid JSON object, nested no deeper
// than jsonscan.MaxNesting, with an error wrapping
// streaming.ErrInvalidJSON. depth is how deeply s nests when already
// known, else 0.
func CheckObject(s string, depth int) error {
	if p := jsonscan.ObjectProblem(s, depth); p != "" {
		return fmt.Errorf("%w: request body %s", streaming.ErrInvalidJSON, p)
	}
	return nil
}

// The members every dialect's keys start with (see Keys).
const (
	Model = iota
	Stream
)

// Keys is the list of top-level members a dialect reads: "model" and
// "stream" (at Model and Stream), then more.
func Keys(more ...string) []string { return append([]string{"model", "stream"}, more...) }

// Read checks that body is one JSON object and reads its top-level members
// named in keys (made by Keys) into vals, vals[i] the raw JSON text of
// keys[i], "" when absent. It returns the Request with api, Model and
// Stream filled, and a string view of body that the dialect's reading
// goes on with: nothing derived from it may outlive the dialect's
// ParseRequest without being copied (CloneStrings, CopyResults).
//
// A member given twice takes its last value, as the providers' JSON
// decoders do: the limits gatekeeper enforces must be the ones the
// provider applies.
func Read(api streaming.API, body []byte, keys, vals []string) (*streaming.Request, string, error) {
	s := jsonscan.View(body)
	it := jsonscan.NewObjectIter(s)
	for n := 0; n < len(s); n++ { // every member consumes input: len(s) bounds the count
		mem, ok := it.Next()
		if !ok {
			break
		}
		k := mem.Name()
		for i, key := range keys {
			if k == key {
				vals[i] = mem.Val
				break
			}
		}
	}
	depth := 0 // unknown unless the walk reached the body's end
	if it.Closed && jsonscan.SkipSpace(s, it.Offset()) == len(s) {
		depth = it.Depth + 1
	}
	if err := CheckObject(s, depth); err != nil {
		return nil, "", err
	}
	req := &streaming.Request{API: api, Stream: vals[Stream] == "true"}
	if v, ok := jsonscan.StringValue(vals[Model]); ok {
		req.Model = strings.Clone(v)
	}
	return req, s, nil
}

// SetMaxOutput records field as req's output limit when raw is a JSON
// number, and reports whether it did.
func SetMaxOutput(req *streaming.Request, field, raw string) bool {
	if !jsonscan.IsNumber(raw) {
		return false
	}
	req.MaxOutputTokens = gjson.Parse(raw).Int()
	req.MaxOutputField = field
	return true
}

// FirstName is the first of raws that is a non-empty JSON string, decoded;
// without escapes it is a view of the body.
func FirstName(raws ...string) string {
	for _, raw := range raws {
		if v, ok := jsonscan.StringValue(raw); ok && v != "" {
			return v
		}
	}
	return ""
}

// AppendName appends name unless it is empty.
func AppendName(names []string, name string) []string {
	if name == "" {
		return names
	}
	return append(names, name)
}

// NameOrType is a tool's name, else its type: how Anthropic tools and the
// functions inside a Responses namespace go.
func NameOrType(tool string) string {
	o := jsonscan.ReadObject(tool, "name", "type")
	return FirstName(o[0], o[1])
}

// Pending is a tool result whose id still points into the body.
type Pending struct {
	ID       string
	Type     string
	IsError  bool
	Digest   uint64
	CopyType bool // Type views the body
}

// After returns an iterator over the elements of arr that follow the last
// one isOutput accepts, or over all of them when none does. Finding the
// last output first means only the tail's elements are looked into.
func After(arr string, isOutput func(string) bool) jsonscan.ArrayIter {
	it := jsonscan.NewArrayIter(arr)
	tail := it
	for e, ok := it.Next(); ok; e, ok = it.Next() {
		if isOutput(e) {
			tail = it
		}
	}
	return tail
}

// IsAssistantMessage reports whether a conversation item has role
// "assistant".
func IsAssistantMessage(msg string) bool {
	return jsonscan.IsString(jsonscan.MemberRaw(msg, "role"), "assistant")
}

// CopyResults copies the pending results out of the body.
func CopyResults(tail []Pending) []streaming.ToolResult {
	if len(tail) == 0 {
		return nil
	}
	var buf [16]string
	ids := buf[:0]
	for _, p := range tail {
		ids = append(ids, p.ID)
	}
	ids = CloneStrings(ids)
	out := make([]streaming.ToolResult, len(tail))
	for i, p := range tail {
		typ := p.Type
		if p.CopyType {
			typ = strings.Clone(typ)
		}
		out[i] = streaming.ToolResult{ID: ids[i], Type: typ, IsError: p.IsError, Digest: p.Digest}
	}
	return out
}

// CloneStrings copies strs into one new allocation, so that none of them
// points into the body any more.
func CloneStrings(strs []string) []string {
	if len(strs) == 0 {
		return nil
	}
	n := 0
	for _, s := range strs {
		n += len(s)
	}
	var b strings.Builder
	b.Grow(n)
	for _, s := range strs {
		b.WriteString(s)
	}
	all := b.String()
	out := make([]string, len(strs))
	off := 0
	for i, s := range strs {
		out[i] = all[off : off+len(s)]
		off += len(s)
	}
	return out
}
