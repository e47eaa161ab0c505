package feed

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gatekeeper/trajectory"
)

// Kind names an event of the stream.
type Kind string

// The kinds of events. Dropped and Reset are written to one subscriber
// only, never to the log.
const (
	// KindRecord: a trajectory record changed (state, stage, spend,
	// pending calls, control); data {"record", "events"}.
	KindRecord Kind = "record"
	// KindTurn: a model call ended; data is the turn's log entry (model,
	// usage, dollars, stop...).
	KindTurn Kind = "turn"
	// KindApproval: an approval request was opened, voted on or decided;
	// data {"change", "request"}.
	KindApproval Kind = "approval"
	// KindKeys: provider keys' headroom and queue lengths changed; data
	// {"headroom": {"provider/key": fraction}, "queues": {"class": n}}.
	KindKeys Kind = "keys"
	// KindDropped ends a subscription that fell too far behind; data
	// {"reason", "last_id"}.
	KindDropped Kind = "dropped"
	// KindReset opens a subscription whose Last-Event-ID is older than
	// the log keeps: events were lost, the client must reload.
	KindReset Kind = "reset"
)

// Kinds lists the kinds a subscriber may ask for.
var Kinds = []Kind{KindRecord, KindTurn, KindApproval, KindKeys}

// Valid reports whether k is a kind a subscriber may ask for.
func (k Kind) Valid() bool {
	for _, v := range Kinds {
		if k == v {
			return true
		}
	}
	return false
}

// Event is one entry of the stream. ID is assigned by the log; it orders
// events and is what a subscriber resumes from.
type Event struct {
	ID         string    `json:"id"`
	Kind       Kind      `json:"kind"`
	At         time.Time `json:"at"`
	Tenant     string    `json:"tenant,omitempty"`
	Trajectory string    `json:"trajectory,omitempty"`
	// Person and Groups, on a turn event of a run a person started, say
	// who (trajectory.Person's label and groups), so that a consumer of
	// turns need not follow the record events; absent for a virtual key.
	Person string          `json:"person,omitempty"`
	Groups []string        `json:"groups,omitempty"`
	Data   json.RawMessage `json:"data"`

	id  ID     // parsed ID
	enc []byte // the event's JSON, once encoded for subscribers (JSON)
}

// JSON is the event as a subscriber receives it, encoding/json's bytes
// for Event. The feed encodes each event once for all of its
// subscribers; an event not from the feed is encoded here.
func (e *Event) JSON() []byte {
	if e.enc != nil {
		return e.enc
	}
	return appendEvent(nil, e)
}

// appendEvent appends e's JSON, written as appendEntry writes an entry,
// with its id first.
func appendEvent(b []byte, e *Event) []byte {
	b = append(b, `{"id":`...)
	b = trajectory.AppendJSONString(b, e.ID)
	b = append(b, ',')
	return appendFields(b, e)
}

// entry is an Event as the log stores it: without its ID, which is the
// log's.
type entry struct {
	Kind       Kind            `json:"kind"`
	At         time.Time       `json:"at"`
	Tenant     string          `json:"tenant,omitempty"`
	Trajectory string          `json:"trajectory,omitempty"`
	Person     string          `json:"person,omitempty"`
	Groups     []string        `json:"groups,omitempty"`
	Data       json.RawMessage `json:"data"`
}

// errEntry is a log entry that is not an event: anyone who can write to
// Redis can add one, so it is counted and skipped.
var errEntry = errors.New("feed: malformed log entry")

// appendEntry appends e as the Redis log stores it: entry's JSON, as
// encoding/json writes it for data gatekeeper built (compact, its strings
// escaped as encoding/json's), without reflection and without scanning
// Data again. Data empty is null. A time RFC 3339 cannot say is written
// as the zero time, which decodes.
func appendEntry(b []byte, e *Event) []byte {
	return appendFields(append(b, '{'), e)
}

// appendFields appends the members of an entry and its closing brace.
func appendFields(b []byte, e *Event) []byte {
	b = append(b, `"kind":`...)
	b = trajectory.AppendJSONString(b, string(e.Kind))
	b = append(b, `,"at":`...)
	var ok bool
	if b, ok = trajectory.AppendJSONTime(b, e.At); !ok {
		b, _ = trajectory.AppendJSONTime(b, time.Time{})
	}
	if e.Tenant != "" {
		b = append(b, `,"tenant":`...)
		b = trajectory.AppendJSONString(b, e.Tenant)
	}
	if e.Trajectory != "" {
		b = append(b, `,"trajectory":`...)
		b = trajectory.AppendJSONString(b, e.Trajectory)
	}
	if e.Person != "" {
		b = append(b, `,"person":`...)
		b = trajectory.AppendJSONString(b, e.Person)
	}
	if len(e.Groups) > 0 {
		b = append(b, `,"groups":[`...)
		for i, g := range e.Groups {
			if i > 0 {
				b = append(b, ',')
			}
			b = trajectory.AppendJSONString(b, g)
		}
		b = append(b, ']')
	}
	b = append(b, `,"data":`...)
	if len(e.Data) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, e.Data...)
	}
	return append(b, '}')
}

// decodeEntry reads a stored entry back into an event with id.
func decodeEntry(id ID, b []byte) (Event, error) {
	var en entry
	if err := json.Unmarshal(b, &en); err != nil {
		return Event{}, fmt.Errorf("%w %s: %v", errEntry, id, err)
	}
	if !en.Kind.Valid() {
		return Event{}, fmt.Errorf("%w %s: unknown kind %q", errEntry, id, en.Kind)
	}
	if len(en.Data) == 0 {
		en.Data = json.RawMessage("null")
	}
	return Event{ID: id.String(), id: id, Kind: en.Kind, At: en.At, Tenant: en.Tenant, Trajectory: en.Trajectory,
		Person: en.Person, Groups: en.Groups, Data: en.Data}, nil
}

// ID orders the log: milliseconds and a sequence within them, the form of
// a Redis stream entry's id ("1733227200000-3").
type ID struct {
	Ms, Seq uint64
}

// String is the ID as a subscriber sees it (and sends back in
// Last-Event-ID).
func (i ID) String() string {
	// Appended on the stack and made a string once: one allocation, not
	// a number's and the concatenation's. Every event gets its id.
	var b [41]byte
	return string(strconv.AppendUint(append(strconv.AppendUint(b[:0], i.Ms, 10), '-'), i.Seq, 10))
}

// Less orders IDs.
func (i ID) Less(j ID) bool { return i.Ms < j.Ms || i.Ms == j.Ms && i.Seq < j.Seq }

// IsZero reports the ID before every event.
func (i ID) IsZero() bool { return i == ID{} }

// ParseID reads an ID ("<ms>-<seq>"), as a client sends it in
// Last-Event-ID.
func ParseID(s string) (ID, error) {
	ms, seq, ok := strings.Cut(s, "-")
	if !ok || len(s) > 41 {
		return ID{}, fmt.Errorf("feed: event id %q is not <ms>-<seq>", s)
	}
	a, err1 := strconv.ParseUint(ms, 10, 64)
	b, err2 := strconv.ParseUint(seq, 10, 64)
	if err1 != nil || err2 != nil {
		return ID{}, fmt.Errorf("feed: event id %q is not <ms>-<seq>", s)
	}
	return ID{Ms: a, Seq: b}, nil
}

// Filter selects a subscriber's events. Zero fields match everything; a
// field that is set excludes events without it (keys events carry no
// tenant or trajectory).
type Filter struct {
	Tenant string
	// Scope, when set, keeps the events of these tenants only (an admin
	// token's scope), and the events that name no tenant (keys).
	Scope []string
	// Trajectory keeps the events of that record and of every record
	// under it ("run-42" keeps "run-42/3f9a").
	Trajectory string
	Kinds      []Kind
}

// Match reports whether e passes f.
func (f Filter) Match(e *Event) bool {
	if f.Tenant != "" && e.Tenant != f.Tenant {
		return false
	}
	if f.Scope != nil && e.Tenant != "" && !slices.Contains(f.Scope, e.Tenant) {
		return false
	}
	if f.Trajectory != "" && e.Trajectory != f.Trajectory && !strings.HasPrefix(e.Trajectory, f.Trajectory+"/") {
		return false
	}
	if len(f.Kinds) == 0 {
		return true
	}
	for _, k := range f.Kinds {
		if k == e.Kind {
			return true
		}
	}
	return false
}
