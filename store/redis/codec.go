package redis

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"gatekeeper/trajectory"
)

// encodeRecord is the "json" field of a record's hash: the record's JSON
// form without its children, which live in the "kids" field so that Create
// can append one without rewriting the record. Every update encodes each
// record of its chain, so the record is appended to a pooled buffer by its
// own encoder (trajectory.Record.AppendJSON, no reflection) and copied once,
// into the string the command takes.
func encodeRecord(r *trajectory.Record) (string, error) {
	c := *r
	c.Children = nil
	bp := encodeBufs.Get().(*[]byte)
	b, err := c.AppendJSON((*bp)[:0])
	if err != nil {
		encodeBufs.Put(bp)
		return "", fmt.Errorf("redis store: encoding record %q: %w", r.ID, err)
	}
	s := string(b)
	if cap(b) <= maxPooledBuf {
		*bp = b
		encodeBufs.Put(bp)
	}
	return s, nil
}

// encodeBufs are the buffers records are encoded in before their string is
// made; one grown past maxPooledBuf (a record with a long list of lost
// calls, say) is left to the collector.
var encodeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

const maxPooledBuf = 64 << 10

// decodeRecord rebuilds a record from its hash's "json" and "kids" fields,
// as HMGET returns them.
func decodeRecord(id string, js, kids any) (*trajectory.Record, error) {
	s, ok := js.(string)
	if !ok {
		return nil, fmt.Errorf("%w: record %q: json field is %T", errReply, id, js)
	}
	// UnmarshalJSON validates what it reads; json.Unmarshal would scan
	// the record once more before calling it.
	var r trajectory.Record
	if err := r.UnmarshalJSON([]byte(s)); err != nil {
		return nil, fmt.Errorf("redis store: decoding record %q: %w", id, err)
	}
	if r.ID != id {
		return nil, fmt.Errorf("%w: record at the key of %q names itself %q", errReply, id, r.ID)
	}
	switch k := kids.(type) {
	case nil:
	case string:
		if err := json.Unmarshal([]byte(k), &r.Children); err != nil {
			return nil, fmt.Errorf("redis store: decoding children of %q: %w", id, err)
		}
	default:
		return nil, fmt.Errorf("%w: record %q: kids field is %T", errReply, id, kids)
	}
	return &r, nil
}

// eventJSON is an event as its stream entry's "e" field holds it. Seq is
// the entry id and Trajectory the key, so neither is repeated; Data has its
// own field so that its bytes come back exactly as given.
type eventJSON struct {
	At     time.Time            `json:"at"`
	Type   trajectory.EventType `json:"type"`
	From   trajectory.State     `json:"from,omitempty"`
	To     trajectory.State     `json:"to,omitempty"`
	Reason string               `json:"reason,omitempty"`
}

// eventArgs appends evs to args as the scripts read them: event JSON, then
// data ("" for none).
func eventArgs(args []any, evs []trajectory.Event) ([]any, error) {
	var scratch [256]byte
	buf := scratch[:0]
	for i := range evs {
		e := &evs[i]
		b, ok := appendEvent(buf[:0], e)
		if !ok {
			var err error
			b, err = json.Marshal(eventJSON{At: e.At, Type: e.Type, From: e.From, To: e.To, Reason: e.Reason})
			if err != nil {
				return nil, fmt.Errorf("redis store: encoding event: %w", err)
			}
		} else {
			buf = b
		}
		args = append(args, string(b), string(e.Data))
	}
	return args, nil
}

// appendEvent appends e's eventJSON as encoding/json writes it, without
// reflection, when that is plain: strings of printable ASCII none of which
// it escapes, a time RFC 3339 can say. Otherwise it returns false and the
// caller leaves the event to encoding/json, which escapes the rest (or
// refuses the time).
func appendEvent(dst []byte, e *trajectory.Event) ([]byte, bool) {
	n0 := len(dst)
	dst = append(dst, `{"at":"`...)
	dst = e.At.AppendFormat(dst, time.RFC3339Nano)
	if !strictRFC3339(dst[n0+len(`{"at":"`):]) {
		return dst[:n0], false
	}
	dst = append(dst, `","type":`...)
	ok := plainJSON(string(e.Type))
	dst = appendQuoted(dst, string(e.Type))
	if e.From != "" {
		ok = ok && plainJSON(string(e.From))
		dst = append(dst, `,"from":`...)
		dst = appendQuoted(dst, string(e.From))
	}
	if e.To != "" {
		ok = ok && plainJSON(string(e.To))
		dst = append(dst, `,"to":`...)
		dst = appendQuoted(dst, string(e.To))
	}
	if e.Reason != "" {
		ok = ok && plainJSON(e.Reason)
		dst = append(dst, `,"reason":`...)
		dst = appendQuoted(dst, e.Reason)
	}
	if !ok {
		return dst[:n0], false
	}
	return append(dst, '}'), true
}

// strictRFC3339 reports whether s, as time.Time.AppendFormat wrote it in
// RFC 3339, is what time.Time.MarshalJSON accepts: a four-digit year and a
// zone less than 24 hours away.
func strictRFC3339(s []byte) bool {
	if len(s) <= 4 || s[4] != '-' {
		return false
	}
	if s[len(s)-1] == 'Z' {
		return true
	}
	c := s[len(s)-len("Z07:00")]
	h := 10*(s[len(s)-5]-'0') + (s[len(s)-4] - '0')
	return !('0' <= c && c <= '9') && h < 24
}

// plainJSON reports whether encoding/json writes s as it is between its
// quotes: printable ASCII without a quote, a backslash or one of < > &.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

func appendQuoted(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// decodeEvent rebuilds the event of one stream entry.
func decodeEvent(id, entryID string, values map[string]any) (trajectory.Event, error) {
	seqText, ok := strings.CutPrefix(entryID, "0-")
	seq, err := strconv.ParseInt(seqText, 10, 64)
	if !ok || err != nil || seq < 1 {
		return trajectory.Event{}, fmt.Errorf("%w: event of %q has entry id %q", errReply, id, entryID)
	}
	e, ok := values["e"].(string)
	if !ok {
		return trajectory.Event{}, fmt.Errorf("%w: event %d of %q: e field is %T", errReply, seq, id, values["e"])
	}
	var w eventJSON
	if err := json.Unmarshal([]byte(e), &w); err != nil {
		return trajectory.Event{}, fmt.Errorf("redis store: decoding event %d of %q: %w", seq, id, err)
	}
	ev := trajectory.Event{Seq: seq, At: w.At, Trajectory: id, Type: w.Type, From: w.From, To: w.To, Reason: w.Reason}
	switch d := values["d"].(type) {
	case nil:
	case string:
		ev.Data = json.RawMessage(d)
	default:
		return trajectory.Event{}, fmt.Errorf("%w: event %d of %q: d field is %T", errReply, seq, id, d)
	}
	return ev, nil
}
