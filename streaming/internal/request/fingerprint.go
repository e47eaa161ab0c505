package request

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"slices"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
)

// The conversation fingerprint a dialect's ParseRequest puts in
// Request.Fingerprint: a hash of what stays the same from one turn of a
// conversation to the next, read from the raw body like the rest of the
// request.

// fingerprintDomain separates this hash from any other SHA-256 of the same
// bytes, and versions the layout of what is hashed.
const fingerprintDomain = "gatekeeper conversation fingerprint v1"

// Fingerprint hashes the parts of a conversation that no later turn
// changes: api, the system prompt system feeds, the first user message
// user feeds, and the declared tool set. Each field is a tag, a length and
// the decoded text, so that no two different field lists hash the same
// bytes. Either feed may be nil: nothing is fed.
func Fingerprint(api streaming.API, system, user func(*Hasher), tools []string) string {
	th := Hasher{h: sha256.New(), buf: make([]byte, 0, 512)}
	th.field('d', fingerprintDomain)
	th.field('a', string(api))
	th.texts('s', system)
	th.texts('u', user)
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

// Hasher writes length-prefixed fields into a hash. A text field is made
// of JSON string literals taken from the body; since its length must
// precede it, a feed runs twice: once counting the decoded bytes, once
// writing them.
type Hasher struct {
	h        hash.Hash
	buf      []byte // scratch for decoded text and headers; reused so writes don't allocate
	counting bool
	n        uint64
}

func (th *Hasher) header(tag byte, n uint64) {
	th.buf = binary.BigEndian.AppendUint64(append(th.buf[:0], tag), n)
	th.h.Write(th.buf)
}

func (th *Hasher) field(tag byte, s string) {
	th.header(tag, uint64(len(s)))
	for len(s) > 0 {
		n := min(len(s), cap(th.buf))
		th.buf = append(th.buf[:0], s[:n]...)
		th.h.Write(th.buf)
		s = s[n:]
	}
}

func (th *Hasher) texts(tag byte, feed func(*Hasher)) {
	th.counting, th.n = true, 0
	if feed != nil {
		feed(th)
	}
	th.counting = false
	th.header(tag, th.n)
	if feed != nil {
		feed(th)
	}
}

// Text adds the decoded value of raw, a JSON string literal; anything else
// is ignored.
func (th *Hasher) Text(raw string) {
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

// Content adds a message content: a string, or the text of its text parts;
// images, documents and tool blocks are left out.
func (th *Hasher) Content(content string) {
	if jsonscan.IsStringRaw(content) {
		th.Text(content)
		return
	}
	it := jsonscan.NewArrayIter(content)
	for part, ok := it.Next(); ok; part, ok = it.Next() {
		o := jsonscan.ReadObject(part, "type", "text")
		if jsonscan.IsString(o[0], "text") || jsonscan.IsString(o[0], "input_text") {
			th.Text(o[1])
		}
	}
}

// FirstUserContent adds the content of the first message of role "user"
// in messages, an array of messages (Anthropic, Chat).
func (th *Hasher) FirstUserContent(messages string) {
	it := jsonscan.NewArrayIter(messages)
	for msg, ok := it.Next(); ok; msg, ok = it.Next() {
		o := jsonscan.ReadObject(msg, "role", "content")
		if jsonscan.IsString(o[0], "user") {
			th.Content(o[1])
			return
		}
	}
}
