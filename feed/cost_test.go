package feed

import (
	"context"
	"runtime"
	"testing"
	"time"

	"gatekeeper/trajectory"
)

// allocatedBytes is what the process allocated so far.
func allocatedBytes() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// TestMemoryLogAppendFlat: once the log holds its retention, an append
// still costs what it did in an empty log: bytes allocated per append do
// not grow with the entries kept. (An append that copied the log to trim
// it cost about 100 bytes per entry kept.)
func TestMemoryLogAppendFlat(t *testing.T) {
	ctx := context.Background()
	const retain = DefaultRetain
	l := newMemoryLog(time.Now, retain)
	e := []Event{event(KindTurn, "a", "run-1", 1)}
	for range retain + 10 {
		if err := l.append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	const appends = 1000
	before := allocatedBytes()
	for range appends {
		_ = l.append(ctx, e)
	}
	per := (allocatedBytes() - before) / appends
	if per > 512 {
		t.Fatalf("an append to a full log of %d allocates %d bytes; want at most 512, whatever the log holds", retain, per)
	}
	if rs, _, _ := l.read(ctx, ID{}, retain+1); len(rs) != retain {
		t.Fatalf("the log keeps %d entries, want %d", len(rs), retain)
	}
}

// TestFeedUnfollowedCostsNoReads: with nothing subscribed, publishing to
// a full log reads nothing back from it, so an event costs its append
// alone; a subscriber then gets the events published after it came.
func TestFeedUnfollowedCostsNoReads(t *testing.T) {
	f := openFeed(t, Options{Queue: 2 * DefaultRetain})
	evs := make([]Event, DefaultRetain+2000)
	for i := range evs {
		evs[i] = event(KindTurn, "a", "run-1", i)
	}
	publishAll := func(evs []Event, want uint64) {
		t.Helper()
		for _, e := range evs {
			f.Publish(e)
		}
		deadline := time.Now().Add(10 * time.Second)
		for f.Stats().Published < want {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d events published", f.Stats().Published, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	publishAll(evs[:DefaultRetain], DefaultRetain)
	before := allocatedBytes()
	publishAll(evs[DefaultRetain:], uint64(len(evs)))
	// About 40 bytes an event here, against about 220 when the log is
	// read back for nobody.
	if per := (allocatedBytes() - before) / 2000; per > 128 {
		t.Fatalf("an event nobody follows allocates %d bytes in the feed; want at most 128", per)
	}
	s := subscribe(t, f, Filter{}, ID{})
	f.Publish(event(KindTurn, "a", "run-1", 99999))
	if got := number(t, next(t, s)); got != 99999 {
		t.Fatalf("the first subscriber's first event is number %d, want the one published after it came (99999)", got)
	}
}

// TestRecordDataAllocs: a record's event data is encoded in a reused
// buffer and copied out once, not grown from nothing (about nine
// allocations for a record of a turn). Under the race detector the pool
// drops some buffers on purpose, hence the margin.
func TestRecordDataAllocs(t *testing.T) {
	at := time.Date(2026, 12, 7, 14, 0, 0, 42, time.UTC)
	rec := &trajectory.Record{ID: "run-1", Tenant: "demo", State: trajectory.Ready, CreatedAt: at, UpdatedAt: at,
		Turns: 12, Model: "claude-sonnet-4-5", Budget: trajectory.Budget{Turns: 100, Tokens: 1_000_000, Dollars: 5}}
	evs := []trajectory.Event{{Seq: 1, At: at, Trajectory: rec.ID, Type: trajectory.EventTransition, From: trajectory.CallingModel, To: trajectory.Ready}}
	if n := testing.AllocsPerRun(200, func() { _, _ = encodeRecordData(rec, evs) }); n > 4 {
		t.Errorf("encoding a record's data allocates %.1f times, want 1 (at most 4 under the race detector)", n)
	}
}
