package feed

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"gatekeeper/trajectory"
)

// TestEncodersMatchEncodingJSON: a record event's data and a Redis log
// entry, written by their own encoders, are the bytes encoding/json
// wrote for them before, and decode back to the same event.
func TestEncodersMatchEncodingJSON(t *testing.T) {
	at := time.Date(2026, 12, 7, 14, 0, 0, 42, time.UTC)
	rec := &trajectory.Record{ID: "run-1/a", ParentID: "run-1", Tenant: "team <a>", State: trajectory.CallingModel,
		CreatedAt: at, UpdatedAt: at, Turns: 3, Model: "claude-sonnet-4-5"}
	evs := []trajectory.Event{
		{Seq: 1, At: at, Trajectory: rec.ID, Type: trajectory.EventTransition, From: trajectory.Ready, To: trajectory.CallingModel},
		{Seq: 2, At: at, Trajectory: rec.ID, Type: trajectory.EventTurn, Data: json.RawMessage(`{"model":"m","dollars":0.5}`)},
	}
	for _, evs := range [][]trajectory.Event{evs, {}} {
		got, err := appendRecordData(nil, rec, evs)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(struct {
			Record *trajectory.Record `json:"record"`
			Events []trajectory.Event `json:"events"`
		}{rec, evs})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("record data:\n got %s\nwant %s", got, want)
		}
		// Encoded in a pooled buffer: the data handed out stays what it
		// was after the buffer is used again.
		first, err := encodeRecordData(rec, evs)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := encodeRecordData(&trajectory.Record{ID: "other", CreatedAt: at, UpdatedAt: at}, nil); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, want) {
			t.Fatalf("pooled record data:\n got %s\nwant %s", first, want)
		}
	}
	for _, e := range []Event{
		{Kind: KindRecord, At: at, Tenant: "t", Trajectory: "run-1", Data: json.RawMessage(`{"a":1}`)},
		{Kind: KindKeys, At: at.In(time.FixedZone("z", 3600))},
		{Kind: KindTurn, At: at, Tenant: "t", Trajectory: "run-1", Person: "ada@example.com", Groups: []string{"eng", "s\"re"}, Data: json.RawMessage(`{"a":1}`)},
	} {
		got := appendEntry(nil, &e)
		want, err := json.Marshal(entry{Kind: e.Kind, At: e.At, Tenant: e.Tenant, Trajectory: e.Trajectory, Person: e.Person, Groups: e.Groups, Data: e.Data})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("entry:\n got %s\nwant %s", got, want)
		}
		back, err := decodeEntry(ID{Ms: 7}, got)
		if err != nil || back.Kind != e.Kind || !back.At.Equal(e.At) || back.Tenant != e.Tenant || back.Person != e.Person || !slices.Equal(back.Groups, e.Groups) {
			t.Fatalf("entry decodes to %+v, %v", back, err)
		}
	}
}

// TestEventJSON: what a subscriber receives is encoding/json's Event,
// whether the feed encoded it for its subscribers or not.
func TestEventJSON(t *testing.T) {
	at := time.Date(2026, 12, 7, 14, 0, 0, 42, time.UTC)
	for _, e := range []Event{
		{ID: "1-2", Kind: KindRecord, At: at, Tenant: "t<1>", Trajectory: "run-1", Data: json.RawMessage(`{"a":[1,2]}`)},
		{ID: "3-0", Kind: KindKeys, At: at},
		{ID: "4-1", Kind: KindTurn, At: at, Tenant: "t", Trajectory: "run-1", Person: "<ada>", Groups: []string{"eng"}, Data: json.RawMessage(`{}`)},
	} {
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.JSON(); !bytes.Equal(got, want) {
			t.Fatalf("JSON:\n got %s\nwant %s", got, want)
		}
		e.enc = appendEvent(nil, &e)
		if got := e.JSON(); !bytes.Equal(got, want) {
			t.Fatalf("JSON once encoded:\n got %s\nwant %s", got, want)
		}
	}
}
