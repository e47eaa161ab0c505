package feed

import (
	"bytes"
	"context"
	"sync"

	"gatekeeper/trajectory"
)

// publisher is what the decorators need of a Feed.
type publisher interface {
	Publish(e Event)
	// Lost counts an event that could not be published.
	Lost(kind Kind, err error)
}

var _ publisher = (*Feed)(nil)

// SignalingStore is a trajectory store that also carries signals between
// replicas and the links of conversations that name no session to their
// runs, as both of gatekeeper's stores do. Records passes both through:
// the proxy finds them on the store it is given, and a wrapper that hid
// the links would send every such conversation's later turns to a run
// apart from its first.
type SignalingStore interface {
	trajectory.Store
	trajectory.Signals
	trajectory.Links
}

// Records is a trajectory store that publishes every change it saves: a
// record event for each record written (with the log entries written
// with it) and a turn event for each turn entry. It changes nothing about
// the store: the same calls, the same answers, the events published only
// after a write succeeded.
type Records struct {
	SignalingStore
	pub publisher
}

var _ SignalingStore = (*Records)(nil)

// NewRecords wraps s.
func NewRecords(s SignalingStore, f *Feed) *Records {
	return &Records{SignalingStore: s, pub: f}
}

// InProcess reports whether the store r wraps waits on nothing outside
// the process; publishing never waits.
func (r *Records) InProcess() bool {
	ip, ok := r.SignalingStore.(interface{ InProcess() bool })
	return ok && ip.InProcess()
}

// Create implements trajectory.Store.
func (r *Records) Create(ctx context.Context, rec *trajectory.Record, evs ...trajectory.Event) error {
	if err := r.SignalingStore.Create(ctx, rec, evs...); err != nil {
		return err
	}
	r.changed([]*trajectory.Record{rec}, evs)
	return nil
}

// CreateChild implements trajectory.Store.
func (r *Records) CreateChild(ctx context.Context, rec *trajectory.Record, max int, evs ...trajectory.Event) error {
	if err := r.SignalingStore.CreateChild(ctx, rec, max, evs...); err != nil {
		return err
	}
	r.changed([]*trajectory.Record{rec}, evs)
	return nil
}

// Update implements trajectory.Store.
func (r *Records) Update(ctx context.Context, id string, fn func(*trajectory.Record) ([]trajectory.Event, error)) (*trajectory.Record, error) {
	var evs []trajectory.Event // of the run that was saved: an optimistic store may run fn again
	rec, err := r.SignalingStore.Update(ctx, id, func(rec *trajectory.Record) ([]trajectory.Event, error) {
		var err error
		evs, err = fn(rec)
		return evs, err
	})
	if err != nil {
		return rec, err
	}
	r.changed([]*trajectory.Record{rec}, evs)
	return rec, nil
}

// UpdateChain implements trajectory.Store.
func (r *Records) UpdateChain(ctx context.Context, id string, fn func([]*trajectory.Record) ([]trajectory.Event, error)) ([]*trajectory.Record, error) {
	var evs []trajectory.Event
	chain, err := r.SignalingStore.UpdateChain(ctx, id, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		var err error
		evs, err = fn(chain)
		return evs, err
	})
	if err != nil {
		return chain, err
	}
	r.changed(chain, evs)
	return chain, nil
}

// appendRecordData appends a record event's data, {"record", "events"},
// with the record's and the events' own encoders: a record is encoded
// once per write, as the store's own write does, not again by reflection.
func appendRecordData(b []byte, rec *trajectory.Record, evs []trajectory.Event) ([]byte, error) {
	b = append(b, `{"record":`...)
	b, err := rec.AppendJSON(b)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"events":[`...)
	for i := range evs {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = evs[i].AppendJSON(b); err != nil {
			return nil, err
		}
	}
	return append(b, "]}"...), nil
}

// recordBufs hold the encodings of records before their data is copied
// out at its size: grown from nothing, a record's kilobyte took eight
// allocations, three records a turn.
var recordBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledRecordBuf bounds the buffers kept for the next record: one
// record far larger than the rest is not kept.
const maxPooledRecordBuf = 64 << 10

// encodeRecordData is appendRecordData into a buffer of its own.
func encodeRecordData(rec *trajectory.Record, evs []trajectory.Event) ([]byte, error) {
	bp := recordBufs.Get().(*[]byte)
	b, err := appendRecordData((*bp)[:0], rec, evs)
	if err != nil {
		recordBufs.Put(bp)
		return nil, err
	}
	data := bytes.Clone(b)
	if cap(b) <= maxPooledRecordBuf {
		*bp = b
		recordBufs.Put(bp)
	}
	return data, nil
}

// changed publishes the records a write saved and the entries it logged.
// An entry with no trajectory belongs to the first record, as the store
// files it.
func (r *Records) changed(recs []*trajectory.Record, evs []trajectory.Event) {
	for i, rec := range recs {
		if rec == nil {
			continue
		}
		mine := []trajectory.Event{}
		for _, ev := range evs {
			if ev.Trajectory == rec.ID || ev.Trajectory == "" && i == 0 {
				ev.Trajectory = rec.ID
				mine = append(mine, ev)
			}
		}
		at := rec.UpdatedAt
		data, err := encodeRecordData(rec, mine)
		if err != nil {
			r.pub.Lost(KindRecord, err)
			continue
		}
		r.pub.Publish(Event{Kind: KindRecord, At: at, Tenant: rec.Tenant, Trajectory: rec.ID, Data: data})
		for _, ev := range mine {
			if ev.Type == trajectory.EventTurn {
				e := Event{Kind: KindTurn, At: ev.At, Tenant: rec.Tenant, Trajectory: rec.ID, Data: ev.Data}
				if p := rec.Person; p != nil {
					e.Person, e.Groups = p.Label(), p.Groups
				}
				r.pub.Publish(e)
			}
		}
	}
}
