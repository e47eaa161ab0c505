package streaming

import "bytes"

// DefaultMaxEventSize bounds one event (all its lines) when the Reader is
// built without an explicit limit. Anthropic web-search result lines reach
// tens of kilobytes; base64 images in tool results go to megabytes.
const DefaultMaxEventSize = 16 << 20

// Event is one block of a server-sent-events stream: the lines up to and
// including the blank line that ends it. Blocks holding only comments or
// only blank lines are events too (HasData false), so that the concatenation
// of every Event.Raw is exactly the stream.
//
// The slices point into the Reader's buffer and are valid only until the
// callback that received the Event returns.
type Event struct {
	Name    []byte // value of the last "event:" field, empty when none
	Data    []byte // values of the "data:" fields joined with "\n"
	ID      []byte // the last event ID as of this event (it carries over events)
	Retry   int64  // value of a valid "retry:" field, -1 when none
	HasData bool   // at least one "data:" field: the event would be dispatched
	// Comments counts comment lines (":..."), which providers use as keepalives.
	Comments int
	// Unterminated is set on an event dispatched by Finish whose blank line
	// never came (the stream ended first).
	Unterminated bool
	// Raw is the exact bytes of the block, line endings included.
	Raw []byte
}

// Reader splits a byte stream into Events incrementally. Feed it chunks as
// they arrive, split anywhere; it keeps what it cannot dispatch yet. Its
// zero value is not ready: use NewReader.
type Reader struct {
	max int

	buf []byte // bytes of the pending block (only when a block spans Feed calls)

	// Parse state of the pending block; offsets are relative to its start.
	scan       int  // bytes of the block already split into lines
	bomChecked bool // the stream's first bytes were checked for a BOM
	skipLF     bool // the previous chunk ended in CR: a leading LF belongs to it
	nameStart  int
	nameEnd    int
	dataStart  int
	dataEnd    int
	dataLines  int
	data       []byte // joined data when there is more than one data line
	retry      int64
	comments   int
	fields     int // field lines in the block (not comments, not blank)
	id         []byte
	idSet      bool
	ev         Event
}

// NewReader returns a Reader that fails with ErrEventTooLarge when one
// event exceeds maxEventSize bytes (DefaultMaxEventSize when <= 0).
func NewReader(maxEventSize int) *Reader {
	if maxEventSize <= 0 {
		maxEventSize = DefaultMaxEventSize
	}
	r := &Reader{max: maxEventSize}
	r.resetBlock()
	return r
}

func (r *Reader) resetBlock() {
	r.scan = 0
	r.nameStart, r.nameEnd = 0, 0
	r.dataStart, r.dataEnd = 0, 0
	r.dataLines = 0
	r.data = r.data[:0]
	r.retry = -1
	r.comments = 0
	r.fields = 0
}

// Buffered is the number of bytes held for an event that has not ended.
func (r *Reader) Buffered() int { return len(r.buf) }

var bom = []byte("\xEF\xBB\xBF")

// Feed splits p into events and calls fn for each event that completes,
// in order. The Event and its slices are valid only during fn. An error
// from fn stops Feed and is returned; the Reader must not be used after an
// error.
func (r *Reader) Feed(p []byte, fn func(*Event) error) error {
	var work []byte
	if len(r.buf) == 0 {
		work = p // common case: no pending block, parse the caller's bytes in place
	} else {
		r.buf = append(r.buf, p...)
		work = r.buf
	}
	start, err := r.parse(work, fn)
	if err != nil {
		return err
	}
	rest := work[start:]
	if len(rest) > r.max {
		return ErrEventTooLarge
	}
	if len(r.buf) == 0 {
		r.buf = append(r.buf, rest...)
	} else {
		r.buf = r.buf[:copy(r.buf, rest)]
	}
	return nil
}

// parse dispatches every complete block of work and returns the offset at
// which the pending (incomplete) block starts.
func (r *Reader) parse(work []byte, fn func(*Event) error) (int, error) {
	start := 0 // start of the pending block in work
	if !r.bomChecked {
		if len(work) < len(bom) && bytes.HasPrefix(bom, work) {
			return 0, nil // cannot tell yet
		}
		r.bomChecked = true
		if bytes.HasPrefix(work, bom) {
			r.scan = len(bom)
		}
	}
	for {
		if r.skipLF && start+r.scan < len(work) {
			// The LF of a CRLF split across chunks belongs to the line
			// already ended; it travels in the raw bytes of what follows.
			r.skipLF = false
			if work[start+r.scan] == '\n' {
				r.scan++
			}
		}
		line := work[start+r.scan:]
		lf := bytes.IndexByte(line, '\n')
		var cr int
		if lf >= 0 {
			cr = bytes.IndexByte(line[:lf], '\r')
		} else {
			cr = bytes.IndexByte(line, '\r')
		}
		var end, next int // end of the line's content, start of the next line
		switch {
		case cr >= 0 && cr == lf-1: // CRLF
			end, next = cr, lf+1
		case cr >= 0: // lone CR, or a CR ending the chunk whose LF may follow
			end, next = cr, cr+1
			r.skipLF = cr == len(line)-1
		case lf >= 0:
			end, next = lf, lf+1
		default:
			if r.scan+len(line) > r.max {
				return start, ErrEventTooLarge
			}
			return start, nil
		}
		lineStart := r.scan
		r.scan += next
		if r.scan > r.max {
			return start, ErrEventTooLarge
		}
		block := work[start:]
		if end != 0 {
			r.field(block, lineStart, lineStart+end)
			continue
		}
		// A blank line ends the block.
		if err := r.dispatch(block[:r.scan], false, fn); err != nil {
			return start, err
		}
		start += r.scan
		r.resetBlock()
	}
}

// field records one non-blank line, block[ls:le], of the pending block.
func (r *Reader) field(block []byte, ls, le int) {
	line := block[ls:le]
	if line[0] == ':' {
		r.comments++
		return
	}
	r.fields++
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
			r.idSet = true
		}
	case "retry":
		v := block[vs:le]
		if n, ok := parseDigits(v); ok {
			r.retry = n
		}
	}
}

func parseDigits(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
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
	return fn(ev)
}

// Finish ends the stream. Bytes of an event whose blank line never came are
// dispatched as one last Event marked Unterminated (the way the OpenAI and
// Anthropic SDKs flush their decoders at end of stream), so that nothing
// that arrived goes unseen; the caller decides what an unterminated event
// is worth. It returns the error of fn, if any.
func (r *Reader) Finish(fn func(*Event) error) error {
	if len(r.buf) == 0 {
		return nil
	}
	block := r.buf
	if r.scan < len(block) {
		// A last line without its line ending.
		r.field(block, r.scan, len(block))
		r.scan = len(block)
	}
	err := r.dispatch(block, true, fn)
	r.buf = r.buf[:0]
	r.resetBlock()
	return err
}
