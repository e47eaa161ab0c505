package feed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"gatekeeper/internal/redistest"
)

// waitBound bounds every wait of these tests; no assertion is about time.
const waitBound = 10 * time.Second

// backends runs fn once per log: in memory, and on a real Redis.
func backends(t *testing.T, fn func(t *testing.T, open func(t *testing.T, o Options) *Feed)) {
	t.Run("memory", func(t *testing.T) {
		fn(t, func(t *testing.T, o Options) *Feed { return openFeed(t, o) })
	})
	t.Run("redis", func(t *testing.T) {
		url := redistest.Start(t)
		fn(t, func(t *testing.T, o Options) *Feed {
			o.Redis = testRedis(t, url)
			return openFeed(t, o)
		})
	})
}

func testRedis(t *testing.T, url string) *goredis.Client {
	t.Helper()
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func openFeed(t *testing.T, o Options) *Feed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	f, err := New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		if err := f.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return f
}

func event(kind Kind, tenant, traj string, n int) Event {
	return Event{Kind: kind, At: time.Unix(1_800_000_000, 0).UTC(), Tenant: tenant, Trajectory: traj, Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
}

func number(t *testing.T, e Event) int {
	t.Helper()
	var d struct{ N int }
	if err := json.Unmarshal(e.Data, &d); err != nil {
		t.Fatalf("event %s: data %s: %v", e.ID, e.Data, err)
	}
	return d.N
}

// next reads one event within waitBound.
func next(t *testing.T, s *Subscription) Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	e, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return e
}

func subscribe(t *testing.T, f *Feed, flt Filter, after ID) *Subscription {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := f.Subscribe(ctx, flt, after)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestFeedDeliversInOrderWithFilters(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	backends(t, func(t *testing.T, open func(*testing.T, Options) *Feed) {
		f := open(t, Options{})
		all := subscribe(t, f, Filter{}, ID{})
		tree := subscribe(t, f, Filter{Trajectory: "run-1"}, ID{})
		turns := subscribe(t, f, Filter{Tenant: "a", Kinds: []Kind{KindTurn}}, ID{})
		sent := []Event{
			event(KindRecord, "a", "run-1", 0),
			event(KindTurn, "a", "run-1/3f", 1),
			event(KindRecord, "a", "run-10", 2), // not under run-1
			event(KindTurn, "b", "run-2", 3),
			event(KindKeys, "", "", 4),
			event(KindApproval, "a", "run-1", 5),
		}
		for _, e := range sent {
			f.Publish(e)
		}
		var last ID
		for i := range sent {
			e := next(t, all)
			if n := number(t, e); n != i {
				t.Fatalf("event %d of the unfiltered stream is #%d", i, n)
			}
			if !last.Less(e.id) || e.ID != e.id.String() {
				t.Fatalf("ids out of order: %s after %s", e.ID, last)
			}
			last = e.id
		}
		for _, want := range []int{0, 1, 5} {
			if n := number(t, next(t, tree)); n != want {
				t.Fatalf("trajectory run-1 with descendants: got #%d, want #%d", n, want)
			}
		}
		if n := number(t, next(t, turns)); n != 1 {
			t.Fatalf("tenant a's turns: got #%d, want #1", n)
		}
	})
}

// TestFeedResumeLosesNothing resumes from every point of a sequence while
// more events are published: each resume gets exactly the events after
// its point, once, in order.
func TestFeedResumeLosesNothing(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, Options) *Feed) {
		f := open(t, Options{})
		watch := subscribe(t, f, Filter{}, ID{})
		const total = 40
		ids := make([]ID, 0, total)
		for i := range 20 {
			f.Publish(event(KindRecord, "a", "run-1", i))
		}
		for range 20 {
			ids = append(ids, next(t, watch).id)
		}
		for _, from := range []int{0, 7, 19} {
			s := subscribe(t, f, Filter{}, ids[from])
			if s.Gap {
				t.Fatalf("resume from #%d: reported a gap", from)
			}
			if from == 0 { // publish more while this one catches up
				for i := 20; i < total; i++ {
					f.Publish(event(KindRecord, "a", "run-1", i))
				}
			}
			for want := from + 1; want < total; want++ {
				if n := number(t, next(t, s)); n != want {
					t.Fatalf("resume from #%d: got #%d, want #%d", from, n, want)
				}
			}
		}
	})
}

func TestFeedResumeOutsideRetention(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, Options) *Feed) {
		f := open(t, Options{Retain: 5})
		watch := subscribe(t, f, Filter{}, ID{})
		f.Publish(event(KindRecord, "a", "run-1", 0))
		first := next(t, watch).id
		// Redis trims MAXLEN ~ by whole nodes (100 entries by default):
		// publish well past that.
		for i := 1; i < 400; i++ {
			f.Publish(event(KindRecord, "a", "run-1", i))
		}
		for number(t, next(t, watch)) != 399 {
		}
		s := subscribe(t, f, Filter{}, first)
		if !s.Gap {
			t.Fatal("resuming from an event the log no longer keeps reported no gap")
		}
		if n := number(t, next(t, s)); n <= 1 {
			t.Fatalf("after the gap the first event is #%d, want one kept by the log", n)
		}
	})
}

// TestFeedDropsSlowSubscriber: a subscriber that never reads loses its
// place and learns it; publishing went on for everyone else.
func TestFeedDropsSlowSubscriber(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, Options) *Feed) {
		f := open(t, Options{Buffer: 4})
		slow := subscribe(t, f, Filter{}, ID{})
		fast := subscribe(t, f, Filter{}, ID{})
		const total = 30
		got := 0
		for i := range total {
			f.Publish(event(KindRecord, "a", "run-1", i))
			if number(t, next(t, fast)) != i { // read as it goes: never more than 1 behind
				t.Fatalf("fast subscriber out of order at #%d", i)
			}
			got++
		}
		var err error
		n := 0
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		for ; n <= total; n++ {
			if _, err = slow.Next(ctx); err != nil {
				break
			}
		}
		if !errors.Is(err, ErrDropped) {
			t.Fatalf("slow subscriber: err = %v after %d events, want ErrDropped", err, n)
		}
		if n != 4 {
			t.Errorf("slow subscriber got %d events before the drop, want its buffer of 4", n)
		}
		if st := f.Stats(); st.Dropped != 1 || st.Lost != 0 || got != total {
			t.Errorf("stats = %+v, fast got %d: want 1 dropped, nothing lost, %d delivered", st, got, total)
		}
		// The drop names where to resume: everything after it is still there.
		r := subscribe(t, f, Filter{}, slow.Last())
		if n := number(t, next(t, r)); n != 4 {
			t.Errorf("resuming after the drop starts at #%d, want #4", n)
		}
	})
}

// TestFeedPublishNeverWaits: with the log's writer unable to keep up (a
// queue of 1 and a closed feed), Publish returns and counts the loss.
func TestFeedPublishNeverWaits(t *testing.T) {
	f := openFeed(t, Options{Queue: 1})
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		f.Publish(event(KindRecord, "a", "r", i))
	}
	if st := f.Stats(); st.Lost != 99 {
		t.Errorf("lost = %d, want 99 (one fits the queue)", st.Lost)
	}
	if _, err := f.Subscribe(ctx, Filter{}, ID{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Subscribe after Close: %v, want ErrClosed", err)
	}
}

// TestFeedSkipsForeignEntries: anything else written to the stream is
// counted and passed over, and the events after it still arrive.
func TestFeedSkipsForeignEntries(t *testing.T) {
	url := redistest.Start(t)
	rdb := testRedis(t, url)
	f := openFeed(t, Options{Redis: rdb})
	s := subscribe(t, f, Filter{}, ID{})
	ctx := context.Background()
	for _, vals := range [][]any{{"e", "not json"}, {"other", "x"}, {"e", `{"kind":"nope","data":1}`}} {
		if err := rdb.XAdd(ctx, &goredis.XAddArgs{Stream: StreamKey, Values: vals}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	f.Publish(event(KindTurn, "a", "r", 7))
	if n := number(t, next(t, s)); n != 7 {
		t.Fatalf("got #%d, want #7", n)
	}
	if st := f.Stats(); st.Malformed != 3 {
		t.Errorf("malformed = %d, want 3", st.Malformed)
	}
}

// TestFeedAcrossReplicas: what one process publishes reaches the
// subscribers of another on the same Redis, and its own.
func TestFeedAcrossReplicas(t *testing.T) {
	url := redistest.Start(t)
	a := openFeed(t, Options{Redis: testRedis(t, url)})
	b := openFeed(t, Options{Redis: testRedis(t, url)})
	sa := subscribe(t, a, Filter{}, ID{})
	sb := subscribe(t, b, Filter{}, ID{})
	for i := range 10 {
		src := a
		if i%2 == 1 {
			src = b
		}
		src.Publish(event(KindRecord, "a", "r", i))
		// Wait for each before the next: replicas' events have one order
		// only once appended.
		for _, s := range []*Subscription{sa, sb} {
			if n := number(t, next(t, s)); n != i {
				t.Fatalf("got #%d, want #%d", n, i)
			}
		}
	}
}

func TestParseID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ID
		ok   bool
	}{
		{"1733227200000-3", ID{1733227200000, 3}, true},
		{"0-0", ID{}, true},
		{"", ID{}, false},
		{"12", ID{}, false},
		{"a-1", ID{}, false},
		{"1-", ID{}, false},
		{"-1-2", ID{}, false},
		{"18446744073709551616-0", ID{}, false},
	} {
		got, err := ParseID(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseID(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestIDString(t *testing.T) {
	for _, tc := range []struct {
		id   ID
		want string
	}{
		{ID{}, "0-0"},
		{ID{Ms: 1733227200000, Seq: 3}, "1733227200000-3"},
		{ID{Ms: math.MaxUint64, Seq: math.MaxUint64}, "18446744073709551615-18446744073709551615"},
	} {
		if got := tc.id.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.id, got, tc.want)
		}
	}
	id := ID{Ms: 1733227200000, Seq: 12345}
	if n := testing.AllocsPerRun(100, func() { _ = id.String() }); n > 1 {
		t.Errorf("String allocates %.0f times, want 1", n)
	}
}

func FuzzParseID(f *testing.F) {
	for _, s := range []string{"1733227200000-3", "0-0", "", "-", "1-2-3", "99999999999999999999-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID(s)
		if err != nil {
			return
		}
		back, err := ParseID(id.String())
		if err != nil || back != id {
			t.Fatalf("%q: %v round-trips to %v, %v", s, id, back, err)
		}
	})
}

// FuzzDecodeEntry: a stream entry is bytes anyone with access to Redis
// can write; decoding never panics and keeps only events of known kinds.
func FuzzDecodeEntry(f *testing.F) {
	ev := event(KindTurn, "a", "r/1", 1)
	good := appendEntry(nil, &ev)
	for _, s := range []string{string(good), `{"kind":"record","data":null}`, `{"kind":"x"}`, `[]`, `{"kind":"keys","at":"bad"}`, ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEntry(ID{Ms: 1}, b)
		if err != nil {
			return
		}
		if !e.Kind.Valid() || e.ID != "1-0" || len(e.Data) == 0 {
			t.Fatalf("decoded %+v", e)
		}
		if _, err := json.Marshal(e); err != nil {
			t.Fatalf("decoded event does not encode: %v", err)
		}
	})
}

func TestFeedEndSubscriptions(t *testing.T) {
	f := openFeed(t, Options{})
	s := subscribe(t, f, Filter{}, ID{})
	f.EndSubscriptions()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	if _, err := s.Next(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Next after EndSubscriptions: %v, want ErrClosed", err)
	}
	if _, err := f.Subscribe(ctx, Filter{}, ID{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Subscribe after EndSubscriptions: %v, want ErrClosed", err)
	}
}
