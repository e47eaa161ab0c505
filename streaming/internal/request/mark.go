package request

import (
	"strings"

	"github.com/cespare/xxhash/v2"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
)

// Marker reads the mark of the model's first reply a conversation replays
// (streaming.Request.FirstReply): the thought signature of its first call
// part (Gemini), else the id of the reply's first client tool call, else
// the digest of its text. A dialect feeds it the reply's parts
// in order.
type Marker struct {
	sig     string // the first call part's thought signature (Gemini), decoded; may point into the body
	call    string // the first call id, decoded; may point into the body
	text    *xxhash.Digest
	buf     [64]byte
	hasText bool
}

// Call notes a client tool call whose id is raw, a JSON string literal;
// only the first one with an id counts.
func (m *Marker) Call(raw string) {
	if m.call != "" {
		return
	}
	if id, ok := jsonscan.StringValue(raw); ok {
		m.call = id
	}
}

// Signature notes the thought signature raw (a JSON string literal) of
// the reply's first call part; it names the reply before any call id.
func (m *Marker) Signature(raw string) {
	if id, ok := jsonscan.StringValue(raw); ok && id != "" && m.sig == "" {
		m.sig = id
	}
}

// Text adds a text part, raw a JSON string literal; anything else is
// ignored.
func (m *Marker) Text(raw string) {
	if !jsonscan.IsStringRaw(raw) {
		return
	}
	if m.text == nil {
		m.text = xxhash.New()
	}
	m.hasText = true
	s := raw[1 : len(raw)-1]
	for i := 0; i < len(s); {
		var d []byte
		d, i = jsonscan.UnquoteInto(m.buf[:0], s, i)
		if len(d) == 0 {
			return // cannot happen with a non-empty scratch buffer; never loop forever
		}
		_, _ = m.text.Write(d)
	}
}

// Content adds a message content: a string, or its text parts ("text",
// "output_text").
func (m *Marker) Content(content string) {
	if jsonscan.IsStringRaw(content) {
		m.Text(content)
		return
	}
	it := jsonscan.NewArrayIter(content)
	for part, ok := it.Next(); ok; part, ok = it.Next() {
		o := jsonscan.ReadObject(part, "type", "text")
		if jsonscan.IsString(o[0], "text") || jsonscan.IsString(o[0], "output_text") {
			m.Text(o[1])
		}
	}
}

// Mark is the mark read (a copy, sharing no memory with the body); ""
// when the reply had neither a call id nor text.
func (m *Marker) Mark() string {
	switch {
	case m.sig != "":
		return streaming.SignatureMark(m.sig)
	case m.call != "":
		return streaming.CallMark(m.call)
	case m.hasText:
		return streaming.TextMark(m.text.Sum64())
	}
	return ""
}

// SessionHint is the client's session id in raw, a JSON string of 1 to
// streaming.MaxSessionHint bytes, copied; "" otherwise.
func SessionHint(raw string) string {
	v, ok := jsonscan.StringValue(raw)
	if !ok || len(v) > streaming.MaxSessionHint {
		return ""
	}
	return strings.Clone(v)
}
