package feed

import (
	"context"
	"encoding/json"

	"gatekeeper/trajectory"
)

// publisher is what the decorators need of a Feed.
type publisher interface {
	Publish(e Event)
}

var _ publisher = (*Feed)(nil)

// SignalingStore is a trajectory store that also carries signals between
// replicas, as both of gatekeeper's stores do.
type SignalingStore interface {
	trajectory.Store
	trajectory.Signals
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

// Create implements trajectory.Store.
func (r *Records) Create(ctx context.Context, rec *trajectory.Record, evs ...trajectory.Event) error {
	if err := r.SignalingStore.Create(ctx, rec, evs...); err != nil {
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

// recordData is a record event's data.
type recordData struct {
	Record *trajectory.Record `json:"record"`
	Events []trajectory.Event `json:"events"`
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
		data, err := json.Marshal(recordData{Record: rec, Events: mine})
		if err != nil {
			continue // a Record always encodes
		}
		r.pub.Publish(Event{Kind: KindRecord, At: at, Tenant: rec.Tenant, Trajectory: rec.ID, Data: data})
		for _, ev := range mine {
			if ev.Type == trajectory.EventTurn {
				r.pub.Publish(Event{Kind: KindTurn, At: ev.At, Tenant: rec.Tenant, Trajectory: rec.ID, Data: ev.Data})
			}
		}
	}
}
