package streaming

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"slices"
	"strings"

	"gatekeeper/streaming/internal/jsonscan"
)

// The conversation fingerprint ParseRequest puts in Request.Fingerprint: a
// hash of what stays the same from one turn of a conversation to the next,
// read from the raw body like the rest of the request.

// fingerprintDomain separates this hash from any other SHA-256 of the same
// bytes, and versions the layout of what is hashed.
const fingerprintDomain = "gatekeeper conversation fingerprint v1"

// billingPrefix starts the system block Claude Code rewrites on every
// request; a fingerprint that included it would change every turn.
const billingPrefix = "x-anthropic-billing-header"

// fingerprint hashes the parts of a conversation that no later turn
// changes: api, system prompt, first user message and the declared tool
// set. Each field is a tag, a length and the decoded text, so that no two
// different field lists hash the same bytes.
func fingerprint(api API, m *members, tools []string) string {
	th := textHasher{h: sha256.New(), buf: make([]byte, 0, 512)}
	th.field('d', fingerprintDomain)
	th.field('a', string(api))
	th.texts('s', func(th *textHasher) { m.systemTexts(api, th) })
	th.texts('u', func(th *textHasher) { m.firstUserTexts(api, th) })
	// The tool set, not its order: a client may list the same tools
	// differently from one turn to the next.
	var buf [32]string
	sorted := append(buf[:0], tools...)
	slices.Sort(sorted)
	th.header('t', uint64(len(sorted)))
	for _, name := range sorted {
		th.field('n', name)
	}
	sum := th.h.Sum(th.buf[:0])
	var out [32]byte
	hex.Encode(out[:], sum[:16])
	return string(out[:])
}

// systemTexts feeds th the system prompt: Anthropic's system string or
// text blocks (without Claude Code's billing line), Responses instructions,
// and the text of the leading system/developer messages (Chat, Responses).
func (m *members) systemTexts(api API, th *textHasher) {
	switch api {
	case APIAnthropic:
		if jsonscan.IsStringRaw(m.system) {
			th.text(m.system)
			return
		}
		it := jsonscan.NewArrayIter(m.system)
		for blk, ok := it.Next(); ok; blk, ok = it.Next() {
			o := jsonscan.ReadObject(blk, "type", "text")
			if jsonscan.IsString(o[0], "text") && !jsonscan.HasPrefixDecoded(o[1], billingPrefix) {
				th.text(o[1])
			}
		}
	case APIChat:
		it := jsonscan.NewArrayIter(m.messages)
		for msg, ok := it.Next(); ok; msg, ok = it.Next() {
			o := jsonscan.ReadObject(msg, "role", "content")
			if !jsonscan.IsString(o[0], "system") && !jsonscan.IsString(o[0], "developer") {
				return
			}
			contentTexts(o[1], th)
		}
	case APIResponses:
		if jsonscan.IsStringRaw(m.instructions) {
			th.text(m.instructions)
		}
		it := jsonscan.NewArrayIter(m.input)
		for item, ok := it.Next(); ok; item, ok = it.Next() {
			o := jsonscan.ReadObject(item, "type", "role", "content")
			typ, _ := jsonscan.StringValue(o[0])
			if typ != "message" && typ != "" {
				if isModelOutput(typ, item) || strings.HasSuffix(typ, "_output") {
					return
				}
				continue // additional_tools and other items that are not messages
			}
			if !jsonscan.IsString(o[1], "system") && !jsonscan.IsString(o[1], "developer") {
				return
			}
			contentTexts(o[2], th)
		}
	}
}

// firstUserTexts feeds th the text of the conversation's first user
// message. With history held by the server (previous_response_id,
// conversation) the input starts at the latest turn, which changes every
// turn, so nothing is fed.
func (m *members) firstUserTexts(api API, th *textHasher) {
	switch api {
	case APIAnthropic, APIChat:
		it := jsonscan.NewArrayIter(m.messages)
		for msg, ok := it.Next(); ok; msg, ok = it.Next() {
			o := jsonscan.ReadObject(msg, "role", "content")
			if jsonscan.IsString(o[0], "user") {
				contentTexts(o[1], th)
				return
			}
		}
	case APIResponses:
		if jsonscan.IsStringValue(m.previousResponseID) || jsonscan.IsObject(m.conversation) || jsonscan.IsStringValue(m.conversation) {
			return
		}
		if jsonscan.IsStringRaw(m.input) {
			th.text(m.input)
			return
		}
		it := jsonscan.NewArrayIter(m.input)
		for item, ok := it.Next(); ok; item, ok = it.Next() {
			o := jsonscan.ReadObject(item, "type", "role", "content")
			if (jsonscan.IsString(o[0], "message") || o[0] == "") && jsonscan.IsString(o[1], "user") {
				contentTexts(o[2], th)
				return
			}
		}
	}
}

// contentTexts feeds th a message content: a string, or the text of its
// text parts; images, documents and tool blocks are left out.
func contentTexts(content string, th *textHasher) {
	if jsonscan.IsStringRaw(content) {
		th.text(content)
		return
	}
	it := jsonscan.NewArrayIter(content)
	for part, ok := it.Next(); ok; part, ok = it.Next() {
		o := jsonscan.ReadObject(part, "type", "text")
		if jsonscan.IsString(o[0], "text") || jsonscan.IsString(o[0], "input_text") {
			th.text(o[1])
		}
	}
}

// textHasher writes length-prefixed fields into a hash. A text field is
// made of JSON string literals taken from the body; since its length must
// precede it, texts runs the feeding function twice: once counting the
// decoded bytes, once writing them.
type textHasher struct {
	h        hash.Hash
	buf      []byte // scratch for decoded text and headers; reused so writes don't allocate
	counting bool
	n        uint64
}

func (th *textHasher) header(tag byte, n uint64) {
	th.buf = binary.BigEndian.AppendUint64(append(th.buf[:0], tag), n)
	th.h.Write(th.buf)
}

func (th *textHasher) field(tag byte, s string) {
	th.header(tag, uint64(len(s)))
	for len(s) > 0 {
		n := min(len(s), cap(th.buf))
		th.buf = append(th.buf[:0], s[:n]...)
		th.h.Write(th.buf)
		s = s[n:]
	}
}

func (th *textHasher) texts(tag byte, feed func(*textHasher)) {
	th.counting, th.n = true, 0
	feed(th)
	th.counting = false
	th.header(tag, th.n)
	feed(th)
}

// text adds the decoded value of raw, a JSON string literal; anything else
// is ignored.
func (th *textHasher) text(raw string) {
	if !jsonscan.IsStringRaw(raw) {
		return
	}
	s := raw[1 : len(raw)-1]
	for i := 0; i < len(s); {
		var d []byte
		d, i = jsonscan.UnquoteInto(th.buf[:0], s, i)
		if len(d) == 0 {
			return // cannot happen with a non-empty scratch buffer; never loop forever
		}
		if th.counting {
			th.n += uint64(len(d))
		} else {
			th.h.Write(d)
		}
	}
}
