package sse

import (
	"bytes"
	"errors"
	"math"
)

// ErrEventTooLarge is returned by the Reader when one event (or one line)
// grows past its limit without ending.
var ErrEventTooLarge = errors.New("sse: event exceeds size limit")

// DefaultMaxEventSize bounds one event (all its lines) when the Reader is
// built without an explicit limit. Anthropic web-search result lines reach
// tens of kilobytes; base64 images in tool results go to megabytes.
const DefaultMaxEventSize = 16 << 20

// retainLimit is the capacity above which an emptied buffer is dropped
// rather than kept: one large event must not pin its size in memory for the
// rest of a stream that may last minutes.
const retainLimit = 1 << 20

// Event is one block of a server-sent-events stream: the lines up to and
// including the blank line that ends it. Blocks holding only comments or
// only blank lines are events too (HasData false), so that the concatenation
// of every Event.Raw is exactly the stream.
//
// The slices point into the Reader's buffer or into the bytes given to Feed
// and are valid only until the callback that received the Event returns.
type Event struct {
	Name    []byte // value of the last "event:" field, empty when none
	Data    []byte // values of the "data:" fields joined with "\n"
	ID      []byte // the last event ID as of this event (it carries over events)
	Retry   int64  // value of the last valid "retry:" field of the block (saturating), -1 when none
	HasData bool   // at least one "data:" field: the event would be dispatched
	// Comments counts comment lines (":..."), which providers use as keepalives.
	Comments int
	// Unterminated is set on an event dispatched by Finish whose blank line
	// never came (the stream ended first).
	Unterminated bool
	// Raw is the exact bytes of the block, line endings included (and, on the
	// first block, a leading byte order mark).
	Raw []byte
	// JSON is whether Data is valid JSON, once a reader of the event
	// checked it (streaming.ValidJSON): the decoder and the call filter
	// both read every event, and the one that asks second reuses the
	// answer instead of scanning Data again. The Reader hands out each
	// event unchecked.
	JSON JSONCheck
}

// JSONCheck is what is known of whether an event's data is valid JSON.
type JSONCheck uint8

// The states of Event.JSON.
const (
	JSONUnchecked JSONCheck = iota
	JSONValid
	JSONInvalid
	// JSONRepeated is valid JSON in which an object repeated a member: the
	// reader that found it rewrote Data and Raw into the one reading every
	// reader shares (streaming.ValidJSON).
	JSONRepeated
)

// Reader splits a byte stream into Events incrementally. Feed it chunks as
// they arrive, split anywhere; it keeps what it cannot dispatch yet. The
// events it hands out do not depend on how the stream was split. Its zero
// value is not ready: use NewReader.
//
// Lines end with LF, CRLF or a lone CR. A CR that is the last byte fed so far
// may be the first half of a CRLF, so the line it ends is only taken once the
// next byte (or Finish) says which: an event whose last line ending is a lone
// CR (or a CRLF split between two reads) is dispatched by the next Feed.
type Reader struct {
	max int
	err error // the first error returned; every later call returns it

	buf        []byte // bytes of the pending block (only when a block spans Feed calls)
	bomChecked bool   // the stream's first bytes were checked for a BOM

	// Parse state of the pending block; offsets are relative to its start.
	scan      int // start of the first line not yet split off
	seen      int // the line at scan holds no CR or LF before this offset (seen >= scan)
	nameStart int
	nameEnd   int
	dataStart int
	dataEnd   int
	dataLines int
	data      []byte // joined data when there is more than one data line
	retry     int64
	comments  int

	id []byte // the last event ID: it outlives the block that set it
	ev Event
}

// NewReader returns a Reader that fails with ErrEventTooLarge when one
// event (its Raw bytes, line endings included) exceeds maxEventSize bytes
// (DefaultMaxEventSize when <= 0). A line is bounded by its event.
func NewReader(maxEventSize int) *Reader {
	if maxEventSize <= 0 {
		maxEventSize = DefaultMaxEventSize
	}
	r := &Reader{max: maxEventSize}
	r.resetBlock()
	return r
}

func (r *Reader) resetBlock() {
	r.scan, r.seen = 0, 0
	r.nameStart, r.nameEnd = 0, 0
	r.dataStart, r.dataEnd = 0, 0
	r.dataLines = 0
	if cap(r.data) > retainLimit {
		r.data = nil
	}
	r.data = r.data[:0]
	r.retry = -1
	r.comments = 0
}

// Buffered is the number of bytes held for an event that has not ended. It
// never exceeds the Reader's limit once Feed has returned.
func (r *Reader) Buffered() int { return len(r.buf) }

var bom = []byte("\xEF\xBB\xBF")

// Feed splits p into events and calls fn for each event that completes,
// in order. The Event and its slices are valid only during fn. Feed does not
// keep p. An error from fn stops Feed and is returned, as is ErrEventTooLarge
// when one event grows past the limit; after an error the Reader is done and
// every later call returns that error.
func (r *Reader) Feed(p []byte, fn func(*Event) error) error {
	if r.err != nil {
		return r.err
	}
	if err := r.feed(p, fn); err != nil {
		r.fail(err)
		return err
	}
	return nil
}

// fail makes err final and lets go of the buffers, which no call will read.
func (r *Reader) fail(err error) {
	r.err = err
	r.buf, r.data = nil, nil
}

func (r *Reader) feed(p []byte, fn func(*Event) error) error {
	// While a block is pending, p moves into the buffer one LF-ended piece at
	// a time: once the pending block is dispatched, the rest of p is parsed
	// where it lies instead of being copied.
	for len(r.buf) > 0 && len(p) > 0 {
		n := bytes.IndexByte(p, '\n') + 1
		if n == 0 {
			n = len(p)
		}
		// One byte past the limit is enough to tell that it was passed.
		if room := r.max - len(r.buf); n > room {
			n = room + 1
		}
		r.hold(p[:n])
		p = p[n:]
		start, err := r.parse(r.buf, false, fn)
		if err != nil {
			return err
		}
		r.keep(start)
		if len(r.buf) > r.max {
			return ErrEventTooLarge
		}
	}
	if len(p) == 0 {
		return nil
	}
	start, err := r.parse(p, false, fn)
	if err != nil {
		return err
	}
	rest := p[start:]
	if len(rest) > r.max {
		return ErrEventTooLarge
	}
	r.hold(rest)
	return nil
}

// hold appends p to the buffer. The buffer at least doubles when it grows
// (up to one byte past the limit), so an event far longer than a read is
// copied a few times in all rather than most of its length on every read.
func (r *Reader) hold(p []byte) {
	if need := len(r.buf) + len(p); need > cap(r.buf) {
		c := min(max(2*cap(r.buf), need, 4096), r.max+1)
		nb := make([]byte, len(r.buf), max(c, need))
		copy(nb, r.buf)
		r.buf = nb
	}
	r.buf = append(r.buf, p...)
}

// keep drops the first n bytes of the buffer, which were dispatched.
func (r *Reader) keep(n int) {
	if n == 0 {
		return
	}
	r.buf = r.buf[:copy(r.buf, r.buf[n:])]
	if len(r.buf) == 0 && cap(r.buf) > retainLimit {
		r.buf = nil
	}
}

// parse dispatches every complete block of work and returns the offset at
// which the pending (incomplete) block starts. atEOF says that no byte
// follows work, so a CR ending it ends a line.
func (r *Reader) parse(work []byte, atEOF bool, fn func(*Event) error) (int, error) {
	if !r.bomChecked {
		if !atEOF && len(work) < len(bom) && bytes.HasPrefix(bom, work) {
			return 0, nil // cannot tell yet
		}
		r.bomChecked = true
		if bytes.HasPrefix(work, bom) {
			r.scan, r.seen = len(bom), len(bom)
		}
	}
	start := 0 // start of the pending block in work
	// Positions of the next LF and CR in work, kept across lines so that a
	// stream using one kind of line ending is searched once for the other.
	lf, cr := notSearched, notSearched
	for {
		from := start + r.seen
		lf = nextIndex(work, from, '\n', lf)
		cr = nextIndex(work, from, '\r', cr)
		end := lf
		if cr >= 0 && (lf < 0 || cr < lf) {
			end = cr
		}
		if end < 0 {
			r.seen = len(work) - start
			return start, nil
		}
		next := end + 1 // start of the next line
		if work[end] == '\r' {
			switch {
			case next < len(work):
				if work[next] == '\n' {
					next++
				}
			case !atEOF:
				// The LF of a CRLF may be in the next chunk.
				r.seen = end - start
				return start, nil
			}
		}
		lineStart := r.scan
		r.scan = next - start
		r.seen = r.scan
		if r.scan > r.max {
			return start, ErrEventTooLarge
		}
		if end-start > lineStart {
			r.field(work[start:], lineStart, end-start)
			continue
		}
		// A blank line ends the block.
		if err := r.dispatch(work[start:next], false, fn); err != nil {
			return start, err
		}
		start = next
		r.resetBlock()
	}
}

const notSearched = -2

// nextIndex returns the index of the first c in work at or after from, -1
// when there is none, given prev, its answer for an earlier from (or
// notSearched).
func nextIndex(work []byte, from int, c byte, prev int) int {
	if prev >= from || prev == -1 {
		return prev
	}
	i := bytes.IndexByte(work[from:], c)
	if i < 0 {
		return -1
	}
	return from + i
}

// field records one non-blank line, block[ls:le], of the pending block.
func (r *Reader) field(block []byte, ls, le int) {
	line := block[ls:le]
	if line[0] == ':' {
		r.comments++
		return
	}
	colon := bytes.IndexByte(line, ':')
	name, vs := line, le
	if colon >= 0 {
		name = line[:colon]
		vs = ls + colon + 1
		if vs < le && block[vs] == ' ' {
			vs++
		}
	}
	switch string(name) { // no allocation: the compiler compares in place
	case "data":
		r.dataLines++
		switch r.dataLines {
		case 1:
			r.dataStart, r.dataEnd = vs, le
		case 2:
			r.data = append(r.data[:0], block[r.dataStart:r.dataEnd]...)
			fallthrough
		default:
			r.data = append(r.data, '\n')
			r.data = append(r.data, block[vs:le]...)
		}
	case "event":
		r.nameStart, r.nameEnd = vs, le
	case "id":
		if bytes.IndexByte(block[vs:le], 0) < 0 {
			r.id = append(r.id[:0], block[vs:le]...)
		}
	case "retry":
		if n, ok := parseDigits(block[vs:le]); ok {
			r.retry = n
		}
	}
}

// parseDigits reads a non-empty run of ASCII digits. A value too large for
// an int64 is still a valid field (WHATWG asks for digits only) and
// saturates.
func parseDigits(v []byte) (int64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			n = math.MaxInt64
			continue
		}
		n = n*10 + d
	}
	return n, true
}

func (r *Reader) dispatch(block []byte, unterminated bool, fn func(*Event) error) error {
	ev := &r.ev
	ev.Name = block[r.nameStart:r.nameEnd]
	switch {
	case r.dataLines == 0:
		ev.Data = block[:0]
	case r.dataLines == 1:
		ev.Data = block[r.dataStart:r.dataEnd]
	default:
		ev.Data = r.data
	}
	ev.ID = r.id
	ev.Retry = r.retry
	ev.HasData = r.dataLines > 0
	ev.Comments = r.comments
	ev.Unterminated = unterminated
	ev.Raw = block
	ev.JSON = JSONUnchecked
	return fn(ev)
}

// Finish ends the stream. Bytes of an event whose blank line never came are
// dispatched as one last Event marked Unterminated (the way the OpenAI and
// Anthropic SDKs flush their decoders at end of stream), so that nothing
// that arrived goes unseen; the caller decides what an unterminated event
// is worth. A CR held back by Feed ends its line here. Finish returns the
// error of fn, if any; the Reader is not to be fed afterwards.
func (r *Reader) Finish(fn func(*Event) error) error {
	if r.err != nil {
		return r.err
	}
	if len(r.buf) == 0 {
		return nil
	}
	start, err := r.parse(r.buf, true, fn)
	if err == nil && start < len(r.buf) {
		block := r.buf[start:]
		if r.scan < len(block) {
			// A last line without its line ending.
			r.field(block, r.scan, len(block))
			r.scan, r.seen = len(block), len(block)
		}
		err = r.dispatch(block, true, fn)
	}
	r.keep(len(r.buf))
	r.resetBlock()
	if err != nil {
		r.fail(err)
	}
	return err
}
