package redis

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gatekeeper/trajectory"
)

// encodeRecord is the "json" field of a record's hash: the record's JSON
// form without its children, which live in the "kids" field so that Create
// can append one without rewriting the record. Every update encodes each
// record of its chain, so the record's own MarshalJSON is called directly:
// json.Marshal would then scan and copy its output again to compact it,
// which it already is, for a tenth of an update's CPU.
func encodeRecord(r *trajectory.Record) (string, error) {
	c := *r
	c.Children = nil
	b, err := c.MarshalJSON()
	if err != nil {
		return "", fmt.Errorf("redis store: encoding record %q: %w", r.ID, err)
	}
	return string(b), nil
}

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
	for _, e := range evs {
		b, err := json.Marshal(eventJSON{At: e.At, Type: e.Type, From: e.From, To: e.To, Reason: e.Reason})
		if err != nil {
			return nil, fmt.Errorf("redis store: encoding event: %w", err)
		}
		args = append(args, string(b), string(e.Data))
	}
	return args, nil
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
