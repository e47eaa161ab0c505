package callfilter

import (
	"strconv"

	"gatekeeper/streaming/internal/jsonscan"
)

// Seq follows the sequence numbers of a stream whose events carry them
// (Responses' sequence_number) so that the client gets them without a gap:
// an event withheld or held leaves its number to the events delivered
// after it, and an event the filter adds takes one. It also keeps the
// number an event that ends the reply early goes on from.
type Seq struct {
	// Offset is added to the number of every event passed on.
	Offset int64
	last   int64 // the last number delivered, when out
	out    bool
	first  int64 // the first number read, when read
	read   bool
}

// ParseSeq reads a sequence_number: an integer written in decimal.
// Anything else is left as it came.
func ParseSeq(raw string) (int64, bool) {
	if raw == "" || !jsonscan.IsNumber(raw) {
		return 0, false // ParseInt's error would cost an allocation per event
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	return n, err == nil
}

// Read notes the number of an event read, when it is numbered.
func (s *Seq) Read(n int64, numbered bool) {
	if numbered && !s.read {
		s.first, s.read = n, true
	}
}

// Delivered notes the number of an event the client gets, when numbered.
func (s *Seq) Delivered(n int64, numbered bool) {
	if numbered {
		s.last, s.out = n, true
	}
}

// Skip leaves the number of an event the client does not get now, when
// numbered, to the events delivered after it.
func (s *Seq) Skip(numbered bool) {
	if numbered {
		s.Offset--
	}
}

// Next is the number an event read as n takes when delivered now, when it
// is numbered, else the one after the last delivered; ok is false when
// neither is known.
func (s *Seq) Next(n int64, numbered bool) (next int64, ok bool) {
	switch {
	case numbered:
		return n + s.Offset, true
	case s.out:
		return s.last + 1, true
	}
	return 0, false
}

// End is the number of an event that ends the reply now: after the last
// delivered, else the first read, else 0 when nothing was read at all
// (fresh); ok is false when the stream numbers none of its events.
func (s *Seq) End(fresh bool) (n int64, ok bool) {
	switch {
	case s.out:
		return s.last + 1, true
	case s.read:
		return s.first, true
	}
	return 0, fresh
}
