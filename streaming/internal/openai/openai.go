// Package openai holds what the two OpenAI APIs, Chat Completions and
// Responses, share in their replies: an event's data and the check that it
// is one object, the error object and error body, usage figures (never
// negative, cache reads and writes taken out of the input), what text
// deltas count as, and the SSE comment that keeps a held stream alive.
package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/sse"
)

// NonNegative keeps a malformed report from crediting a budget.
func NonNegative(n int64) int64 { return max(n, 0) }

// Data is the data of ev less surrounding spaces, empty when it carries
// nothing to decode (no data field, or only spaces); done reports the
// data: [DONE] that ends a Chat stream (and, needlessly, some compatible
// servers' Responses streams).
//
// Data checks the event first (streaming.ValidJSON), so that an event
// repeating a member is read, by every reader after, as rewritten.
func Data(ev *sse.Event) (data []byte, done bool) {
	if !ev.HasData {
		return nil, false
	}
	streaming.ValidJSON(ev)
	data = bytes.TrimSpace(ev.Data)
	return data, bytes.HasPrefix(data, []byte(streaming.DoneMarker))
}

// ProviderError builds a ProviderError from an OpenAI-style error
// object ({"type","code","message",...}) or a bare error string.
func ProviderError(v gjson.Result) streaming.ProviderError {
	pe := streaming.ProviderError{Raw: []byte(v.Raw)}
	if !v.IsObject() {
		pe.Message = strings.Clone(v.String())
		return pe
	}
	typ := v.Get("type").String()
	if typ == "" {
		typ = v.Get("code").String()
	}
	pe.Type = strings.Clone(typ)
	pe.Message = strings.Clone(v.Get("message").String())
	return pe
}

// Text wraps non-JSON data as a string value, for error events whose
// data is plain text.
func Text(data []byte) gjson.Result {
	s := jsonscan.View(data)
	return gjson.Result{Type: gjson.String, Str: s, Raw: s}
}

// Object checks that data is one JSON object and returns it parsed.
// The returned Result aliases data: strings kept past the event must be
// cloned.
func Object(data []byte, what string) (gjson.Result, error) {
	return object(data, gjson.ValidBytes(data), what)
}

// EventObject is Object for data, ev's data less surrounding spaces, with
// the validity the event's other reader found (streaming.ValidJSON) when
// nothing was trimmed.
func EventObject(ev *sse.Event, data []byte, what string) (gjson.Result, error) {
	return object(data, ValidData(ev, data), what)
}

// ValidData reports whether data, ev's data less surrounding spaces, is
// valid JSON: the event's verdict when nothing was trimmed (the usual
// case), else a scan of data, since bytes.TrimSpace trims spaces JSON
// does not allow.
func ValidData(ev *sse.Event, data []byte) bool {
	if len(data) == len(ev.Data) {
		return streaming.ValidJSON(ev)
	}
	return gjson.ValidBytes(data)
}

func object(data []byte, valid bool, what string) (gjson.Result, error) {
	s := jsonscan.View(data)
	if !valid {
		return gjson.Result{}, fmt.Errorf("%w: %s of %d bytes", streaming.ErrInvalidJSON, what, len(data))
	}
	root := gjson.Parse(s)
	if !root.IsObject() {
		return gjson.Result{}, fmt.Errorf("%w: %s is not an object", streaming.ErrInvalidJSON, what)
	}
	return root, nil
}

// ErrorBody is {"error":{"message":msg,"type":typ,"code":typ,"param":null}},
// the error body of both OpenAI APIs.
func ErrorBody(typ, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": typ, "param": nil}}) // maps of strings always marshal
	return b
}

// Usage is the usage of a reply whose input figure counts its cache reads
// and writes, as both APIs report it: those are taken out of the input.
func Usage(input, cached, write, output, reasoning int64) streaming.Usage {
	return streaming.Usage{
		InputTokens:       NonNegative(input - cached - write),
		CachedInputTokens: cached,
		CacheWriteTokens:  write,
		OutputTokens:      output,
		ReasoningTokens:   reasoning,
	}
}

// TextKind says what the text of a delta counts as.
type TextKind uint8

const (
	Said    TextKind = iota // text and refusals: Result.TextBytes and OutputBytes
	Thought                 // thinking and reasoning summaries: OutputBytes only
)

// CountText counts n bytes of text of kind in res.
func CountText(res *streaming.Result, kind TextKind, n int64) {
	res.OutputBytes += n
	if kind == Said {
		res.TextBytes += n
	}
}

// Comment is the keepalive of a held stream while no event of the API's
// own can stand for one: an SSE comment, which the SDKs skip.
var Comment = []byte(": keepalive\n\n")

// CommentKeepalive is a held stream's keepalive that is always Comment.
type CommentKeepalive struct{}

var _ streaming.Keepalive = CommentKeepalive{}

func (CommentKeepalive) Forwarded(*sse.Event, *streaming.Result) {}

func (CommentKeepalive) Event() []byte { return Comment }
