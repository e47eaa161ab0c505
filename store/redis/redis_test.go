package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/internal/redistest"
	"gatekeeper/spendlimit"
	"gatekeeper/store/storetest"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// client dials url for a test and closes the client when it ends.
func client(t testing.TB, url string) goredis.UniversalClient {
	t.Helper()
	o, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// open returns a Store on url, closed when the test ends.
func open(t testing.TB, url string, opts Options) *Store {
	t.Helper()
	opts.URL = url
	return openOpts(t, opts)
}

// openOn returns a Store on r, closed when the test ends.
func openOn(t testing.TB, r redistest.Target, opts Options) *Store {
	t.Helper()
	opts.URL, opts.Cluster = r.URL, r.Cluster
	return openOpts(t, opts)
}

func openOpts(t testing.TB, opts Options) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func create(t testing.TB, s *Store, r *trajectory.Record, evs ...trajectory.Event) {
	t.Helper()
	if err := s.Create(context.Background(), r, evs...); err != nil {
		t.Fatalf("Create %s: %v", r.ID, err)
	}
}

func child(id, parent string) *trajectory.Record {
	r := trajectory.New(id, "team-a", t0)
	r.ParentID = parent
	return r
}

func finish(t testing.TB, s *Store, id string) {
	t.Helper()
	if _, err := s.Update(context.Background(), id, func(r *trajectory.Record) ([]trajectory.Event, error) {
		ts, err := r.Finalize(trajectory.Completed, "finished", t0.Add(time.Hour))
		return trajectory.EventsFor(r.ID, ts), err
	}); err != nil {
		t.Fatalf("finishing %s: %v", id, err)
	}
}

func turnEvent(reason string) trajectory.Event {
	return trajectory.Event{At: t0, Type: trajectory.EventTurn, Reason: reason}
}

func TestContract(t *testing.T) {
	redistest.Each(t, func(t *testing.T, r redistest.Target) {
		storetest.Run(t, func(t *testing.T) trajectory.Store {
			r.Flush(t)
			return openOn(t, r, Options{})
		})
	})
}

// TestUpdateAtomicAcrossReplicas runs two Stores, each with its own
// connections, as two replicas would, against one Redis or one cluster.
func TestUpdateAtomicAcrossReplicas(t *testing.T) {
	redistest.Each(t, testUpdateAtomicAcrossReplicas)
}

func testUpdateAtomicAcrossReplicas(t *testing.T, target redistest.Target) {
	replicas := []*Store{openOn(t, target, Options{}), openOn(t, target, Options{})}
	ctx := context.Background()
	create(t, replicas[0], trajectory.New("run-1", "team-a", t0))

	const perReplica = 25
	var wg sync.WaitGroup
	var runs atomic.Int64
	errs := make(chan error, len(replicas)*perReplica)
	for ri, s := range replicas {
		for i := range perReplica {
			wg.Go(func() {
				_, err := s.Update(ctx, "run-1", func(r *trajectory.Record) ([]trajectory.Event, error) {
					runs.Add(1)
					r.Turns++
					r.Spend.Turns++
					return []trajectory.Event{turnEvent(fmt.Sprintf("%d-%d", ri, i))}, nil
				})
				errs <- err
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	const n = 2 * perReplica
	for _, s := range replicas {
		r, err := s.Get(ctx, "run-1")
		if err != nil {
			t.Fatal(err)
		}
		if r.Turns != n || r.Spend.Turns != n {
			t.Errorf("turns %d, spend turns %d; want %d", r.Turns, r.Spend.Turns, n)
		}
	}
	evs, err := replicas[1].Events(ctx, "run-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkDistinctLog(t, evs, 1, n)
	t.Logf("%d updates ran fn %d times", n, runs.Load())
}

func TestUpdateConflict(t *testing.T) {
	tests := []struct {
		name      string
		attempts  int
		wantErr   error
		wantRuns  int
		wantTurns int64
	}{
		{"gives up after its attempts", 1, ErrConflict, 1, 1},
		{"retries and runs fn again", 2, nil, 2, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			url := redistest.Start(t)
			a := open(t, url, Options{MaxUpdateAttempts: tc.attempts})
			b := open(t, url, Options{})
			ctx := context.Background()
			create(t, a, trajectory.New("run-1", "team-a", t0))
			runs := 0
			_, err := a.Update(ctx, "run-1", func(r *trajectory.Record) ([]trajectory.Event, error) {
				runs++
				if runs == 1 {
					// Another replica saves between this read and its write.
					if _, err := b.Update(ctx, "run-1", func(r *trajectory.Record) ([]trajectory.Event, error) {
						r.Turns++
						return []trajectory.Event{turnEvent("b")}, nil
					}); err != nil {
						t.Fatal(err)
					}
				}
				r.Turns++
				return []trajectory.Event{turnEvent("a")}, nil
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("Update: %v, want %v", err, tc.wantErr)
			}
			if runs != tc.wantRuns {
				t.Errorf("fn ran %d times, want %d", runs, tc.wantRuns)
			}
			r, err := b.Get(ctx, "run-1")
			if err != nil {
				t.Fatal(err)
			}
			if r.Turns != tc.wantTurns {
				t.Errorf("turns %d, want %d", r.Turns, tc.wantTurns)
			}
			evs, err := b.Events(ctx, "run-1", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != int(tc.wantTurns) {
				t.Errorf("%d events, want %d: a lost attempt's events were saved", len(evs), tc.wantTurns)
			}
		})
	}
}

func TestUpdateKeepsCreationTime(t *testing.T) {
	s := open(t, redistest.Start(t), Options{})
	create(t, s, trajectory.New("run-1", "team-a", t0))
	_, err := s.Update(context.Background(), "run-1", func(r *trajectory.Record) ([]trajectory.Event, error) {
		r.CreatedAt = r.CreatedAt.Add(time.Second)
		return nil, nil
	})
	if !errors.Is(err, trajectory.ErrInvalidRecord) {
		t.Fatalf("Update moving CreatedAt: %v, want ErrInvalidRecord", err)
	}
}

func pttl(t *testing.T, c goredis.UniversalClient, key string) time.Duration {
	t.Helper()
	d, err := c.PTTL(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRetention(t *testing.T) {
	const retention = time.Hour
	url := redistest.Start(t)
	rdb := client(t, url)
	now := t0
	s := open(t, url, Options{Retention: retention, Clock: func() time.Time { return now }})
	ctx := context.Background()
	live := func(t *testing.T, id string) {
		t.Helper()
		for _, k := range []string{recKey(id), evKey(id)} {
			if d := pttl(t, rdb, k); d != -1 {
				t.Errorf("live %s has TTL %v, want none", k, d)
			}
		}
	}
	expiring := func(t *testing.T, id string, keys ...string) {
		t.Helper()
		for _, k := range keys {
			if d := pttl(t, rdb, k); d <= retention-time.Minute || d > retention {
				t.Errorf("finished %s has TTL %v, want about %v", k, d, retention)
			}
		}
		r, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		score, err := rdb.ZScore(ctx, expiresOf(id), member(id, r.CreatedAt)).Result()
		if err != nil || int64(score) != now.Add(retention).UnixMilli() {
			t.Errorf("%s expiry index score %v, %v; want %d", id, score, err, now.Add(retention).UnixMilli())
		}
	}

	t.Run("live then finished", func(t *testing.T) {
		create(t, s, trajectory.New("run-1", "team-a", t0), turnEvent("created"))
		if _, err := s.Update(ctx, "run-1", func(r *trajectory.Record) ([]trajectory.Event, error) {
			r.Turns++
			return []trajectory.Event{turnEvent("turn")}, nil
		}); err != nil {
			t.Fatal(err)
		}
		live(t, "run-1")
		finish(t, s, "run-1")
		expiring(t, "run-1", recKey("run-1"), evKey("run-1"))
	})
	t.Run("log started after the finish", func(t *testing.T) {
		create(t, s, trajectory.New("run-2", "team-a", t0))
		finish(t, s, "run-2") // no events: no stream yet
		if err := s.AppendEvents(ctx, "run-2", turnEvent("late")); err != nil {
			t.Fatal(err)
		}
		expiring(t, "run-2", recKey("run-2"), evKey("run-2"))
	})
	t.Run("created finished", func(t *testing.T) {
		r := trajectory.New("run-3", "team-a", t0)
		r.State, r.ExitReason = trajectory.Canceled, "imported"
		create(t, s, r, turnEvent("created"))
		expiring(t, "run-3", recKey("run-3"), evKey("run-3"))
	})
	t.Run("later saves keep the countdown", func(t *testing.T) {
		create(t, s, trajectory.New("run-4", "team-a", t0))
		finish(t, s, "run-4")
		if err := rdb.PExpire(ctx, recKey("run-4"), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update(ctx, "run-4", func(r *trajectory.Record) ([]trajectory.Event, error) {
			r.AddSpend(trajectory.Usage{OutputTokens: 5}, 0.01, false)
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}
		if d := pttl(t, rdb, recKey("run-4")); d <= 0 || d > time.Minute {
			t.Errorf("TTL after a save of a finished record: %v, want at most 1m", d)
		}
	})
	t.Run("chain finished in one step", func(t *testing.T) {
		create(t, s, trajectory.New("run-6", "team-a", t0), turnEvent("created"))
		create(t, s, child("run-6/a", "run-6"), turnEvent("created"))
		create(t, s, child("run-6/a/b", "run-6/a"), turnEvent("created"))
		if _, err := s.UpdateChain(ctx, "run-6/a/b", func(chain []*trajectory.Record) ([]trajectory.Event, error) {
			var evs []trajectory.Event
			for _, r := range chain[:2] {
				ts, err := r.Finalize(trajectory.Completed, "finished", t0.Add(time.Hour))
				if err != nil {
					return nil, err
				}
				evs = append(evs, trajectory.EventsFor(r.ID, ts)...)
			}
			chain[2].Turns++
			return evs, nil
		}); err != nil {
			t.Fatal(err)
		}
		expiring(t, "run-6/a/b", recKey("run-6/a/b"), evKey("run-6/a/b"))
		expiring(t, "run-6/a", recKey("run-6/a"), evKey("run-6/a"))
		live(t, "run-6")
	})
	t.Run("children stay live", func(t *testing.T) {
		create(t, s, trajectory.New("run-5", "team-a", t0))
		create(t, s, child("run-5/a", "run-5"), turnEvent("created"))
		finish(t, s, "run-5")
		live(t, "run-5/a")
	})
}

// createdOf and expiresOf are the record indexes of id's slot.
func createdOf(id string) string { return idxCreated(shardOf(rootOf(id))) }
func expiresOf(id string) string { return idxExpires(shardOf(rootOf(id))) }

// indexed is every member of one kind of record index (idxCreated or
// idxExpires) over every slot the directory lists, sorted.
func indexed(t *testing.T, s *Store, kind func(string) string) []string {
	t.Helper()
	ctx := context.Background()
	shards, err := s.dir.shards(ctx, s.rdb)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, sh := range shards {
		m, err := s.rdb.ZRangeArgs(ctx, goredis.ZRangeArgs{Key: kind(sh), Start: 0, Stop: -1}).Result()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	slices.Sort(out)
	return out
}

// TestIndexPrune plays the part of Redis's expiry by deleting keys, and
// moves the store's clock instead of waiting.
func TestIndexPrune(t *testing.T) {
	const retention = time.Hour
	url := redistest.Start(t)
	rdb := client(t, url)
	ctx := context.Background()
	var now atomic.Int64
	now.Store(t0.UnixNano())
	s := open(t, url, Options{Retention: retention, Clock: func() time.Time { return time.Unix(0, now.Load()) }})

	for _, id := range []string{"gone", "kept", "live"} {
		create(t, s, trajectory.New(id, "team-a", t0))
	}
	finish(t, s, "gone")
	finish(t, s, "kept")
	// An expiry entry left by an update that lost its race to a save that
	// did not finish the record.
	if err := rdb.ZAdd(ctx, expiresOf("live"), goredis.Z{Score: float64(t0.UnixMilli()), Member: member("live", t0)}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, recKey("gone"), evKey("gone")).Err(); err != nil {
		t.Fatal(err)
	}

	prune := func() {
		t.Helper()
		shards, err := s.dir.shards(ctx, s.rdb)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.prune(ctx, shards); err != nil {
			t.Fatal(err)
		}
	}
	// Before retention runs out, only the stale live entry is due.
	prune()
	if got := indexed(t, s, idxExpires); !slices.Equal(got, []string{member("gone", t0), member("kept", t0)}) {
		t.Errorf("expiry index %v, want gone and kept", got)
	}
	all := []string{member("gone", t0), member("kept", t0), member("live", t0)}
	if got := indexed(t, s, idxCreated); !slices.Equal(got, all) {
		t.Errorf("created index %v, want %v", got, all)
	}

	now.Store(t0.Add(retention + time.Second).UnixNano())
	prune()
	if got := indexed(t, s, idxCreated); !slices.Equal(got, all[1:]) {
		t.Errorf("created index %v: the expired record's entry stayed", got)
	}
	// kept's key still has its TTL (the store's clock ran ahead of Redis):
	// its entry is due again when that TTL runs out.
	if got := indexed(t, s, idxExpires); !slices.Equal(got, []string{member("kept", t0)}) {
		t.Errorf("expiry index %v, want kept", got)
	}
	score, err := rdb.ZScore(ctx, expiresOf("kept"), member("kept", t0)).Result()
	if err != nil || int64(score) <= now.Load()/1e6 {
		t.Errorf("kept rescheduled to %v (%v), want after %d", score, err, now.Load()/1e6)
	}
	recs, err := s.List(ctx, trajectory.Filter{})
	if err != nil || len(recs) != 2 || recs[0].ID != "kept" || recs[1].ID != "live" {
		t.Errorf("List after the prune: %v, %v", recs, err)
	}
}

func TestListSkipsStaleEntries(t *testing.T) {
	url := redistest.Start(t)
	rdb := client(t, url)
	s := open(t, url, Options{})
	ctx := context.Background()
	create(t, s, trajectory.New("run-1", "team-a", t0.Add(time.Minute)))
	// An entry of an earlier record under the same id, and one of a record
	// that expired before the prune got to it.
	if _, err := s.dir.ensure(ctx, s.rdb, "run-0"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"run-1", "run-0"} {
		if err := rdb.ZAdd(ctx, createdOf(id), goredis.Z{Member: member(id, t0)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := s.List(ctx, trajectory.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].ID != "run-1" {
		t.Errorf("listed %v, want run-1 once", recs)
	}
	if got := indexed(t, s, idxCreated); !slices.Equal(got, []string{member("run-1", t0.Add(time.Minute))}) {
		t.Errorf("created index %v", got)
	}
}

func TestListChildrenOfExpiredParent(t *testing.T) {
	url := redistest.Start(t)
	rdb := client(t, url)
	s := open(t, url, Options{})
	ctx := context.Background()
	create(t, s, trajectory.New("run-1", "team-a", t0))
	create(t, s, child("run-1/b", "run-1"))
	create(t, s, child("run-1/a", "run-1"))
	if err := rdb.Del(ctx, recKey("run-1")).Err(); err != nil {
		t.Fatal(err)
	}
	parent := "run-1"
	recs, err := s.List(ctx, trajectory.Filter{ParentID: &parent})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	if !slices.Equal(ids, []string{"run-1/a", "run-1/b"}) {
		t.Errorf("children of an expired parent: %v", ids)
	}
}

// hashTag is the part of key Redis Cluster hashes: between the first "{"
// and the next "}", when that is not empty.
func hashTag(key string) string {
	_, rest, ok := strings.Cut(key, "{")
	if !ok {
		return key
	}
	tag, _, ok := strings.Cut(rest, "}")
	if !ok || tag == "" {
		return key
	}
	return tag
}

func TestKeyLayout(t *testing.T) {
	url := redistest.Start(t)
	rdb := client(t, url)
	s := open(t, url, Options{})
	ctx := context.Background()
	create(t, s, trajectory.New("run-42", "team-a", t0), turnEvent("created"))
	create(t, s, child("run-42/3f9a~2", "run-42"), turnEvent("created"))
	create(t, s, child("run-42/3f9a~2/b1~1", "run-42/3f9a~2"))
	if err := s.AppendEvents(ctx, "run-42/3f9a~2/b1~1", turnEvent("turn")); err != nil {
		t.Fatal(err)
	}
	create(t, s, trajectory.New("run-7", "team-b", t0))

	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	want := []string{
		"gk:{idx}:slots",
		createdOf("run-42"),
		createdOf("run-7"),
		"gk:{run-42}:ev:run-42",
		"gk:{run-42}:ev:run-42/3f9a~2",
		"gk:{run-42}:ev:run-42/3f9a~2/b1~1",
		"gk:{run-42}:rec:run-42",
		"gk:{run-42}:rec:run-42/3f9a~2",
		"gk:{run-42}:rec:run-42/3f9a~2/b1~1",
		"gk:{run-7}:rec:run-7",
	}
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Errorf("keys:\n%s\nwant:\n%s", strings.Join(keys, "\n"), strings.Join(want, "\n"))
	}
	// Each index is in the slot of the trees it lists, so the script that
	// creates a record writes its entry in the same step.
	for _, id := range []string{"run-42", "run-7"} {
		if got, want := slotOf(hashTag(createdOf(id))), slotOf(id); got != want {
			t.Errorf("index of %s in slot %d, want the tree's slot %d", id, got, want)
		}
	}
	for _, k := range keys {
		if strings.Contains(k, ":rec:run-42") || strings.Contains(k, ":ev:run-42") {
			if tag := hashTag(k); tag != "run-42" {
				t.Errorf("%s hashes on %q, want the root run-42", k, tag)
			}
		}
	}
	// The record hash holds the record's JSON without its children, which
	// have their own field.
	h, err := rdb.HGetAll(ctx, "gk:{run-42}:rec:run-42").Result()
	if err != nil {
		t.Fatal(err)
	}
	if h["kids"] != `["run-42/3f9a~2"]` || h["ver"] != "2" || h["seq"] != "1" || !strings.Contains(h["json"], `"children":[]`) {
		t.Errorf("record hash %v", h)
	}
	var rec trajectory.Record
	if err := json.Unmarshal([]byte(h["json"]), &rec); err != nil || rec.ID != "run-42" {
		t.Errorf("json field: %v, %+v", err, rec)
	}
	msgs, err := rdb.XRange(ctx, "gk:{run-42}:ev:run-42/3f9a~2/b1~1", "-", "+").Result()
	if err != nil || len(msgs) != 1 || msgs[0].ID != "0-1" {
		t.Errorf("event stream %v, %v; want one entry 0-1", msgs, err)
	}

	for _, id := range []string{"a{b", "a}b", "x/{y}"} {
		if err := s.Create(ctx, trajectory.New(id, "team-a", t0)); !errors.Is(err, trajectory.ErrInvalidRecord) {
			t.Errorf("Create %q: %v, want ErrInvalidRecord", id, err)
		}
		if _, err := s.Get(ctx, id); !errors.Is(err, trajectory.ErrNotFound) {
			t.Errorf("Get %q: %v, want ErrNotFound", id, err)
		}
	}
}

func TestEventData(t *testing.T) {
	s := open(t, redistest.Start(t), Options{})
	ctx := context.Background()
	create(t, s, trajectory.New("run-1", "team-a", t0))
	data := []json.RawMessage{
		json.RawMessage(`{ "usage" : {"input_tokens": 12},  "ids":[ ] }`),
		nil,
		json.RawMessage(`"\u00e9\n"`),
	}
	for _, d := range data {
		if err := s.AppendEvents(ctx, "run-1", trajectory.Event{At: t0, Type: trajectory.EventTurn, Data: d}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := s.Events(ctx, "run-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != len(data) {
		t.Fatalf("%d events", len(evs))
	}
	for i, e := range evs {
		if string(e.Data) != string(data[i]) {
			t.Errorf("event %d data %q, want %q verbatim", i, e.Data, data[i])
		}
	}
}

func TestEventCap(t *testing.T) {
	const limit, appended = 100, 1000
	s := open(t, redistest.Start(t), Options{MaxEventsPerTrajectory: limit})
	ctx := context.Background()
	create(t, s, trajectory.New("run-1", "team-a", t0))
	evs := make([]trajectory.Event, appended)
	for i := range evs {
		evs[i] = turnEvent(fmt.Sprint(i + 1))
	}
	if err := s.AppendEvents(ctx, "run-1", evs...); err != nil {
		t.Fatal(err)
	}
	got, err := s.Events(ctx, "run-1", 0, trajectory.MaxListLimit)
	if err != nil {
		t.Fatal(err)
	}
	// MAXLEN ~ trims whole stream nodes (100 entries by default).
	if len(got) < limit || len(got) > 2*limit {
		t.Fatalf("%d events kept, want %d to %d", len(got), limit, 2*limit)
	}
	for i, e := range got {
		if want := int64(appended - len(got) + i + 1); e.Seq != want || e.Reason != fmt.Sprint(want) {
			t.Fatalf("event %d: seq %d reason %q, want the newest, seq %d", i, e.Seq, e.Reason, want)
		}
	}
	if err := s.AppendEvents(ctx, "run-1", turnEvent("next")); err != nil {
		t.Fatal(err)
	}
	got, err = s.Events(ctx, "run-1", appended, 0)
	if err != nil || len(got) != 1 || got[0].Seq != appended+1 {
		t.Errorf("after trimming: %+v, %v; want seq %d", got, err, appended+1)
	}
}

// checkDistinctLog checks that concurrent writers lost no event: want
// events, numbered on from firstSeq, each with its own reason.
func checkDistinctLog(t *testing.T, evs []trajectory.Event, firstSeq int64, want int) {
	t.Helper()
	reasons := map[string]bool{}
	for i, e := range evs {
		if e.Seq != firstSeq+int64(i) {
			t.Errorf("event %d has seq %d, want %d", i, e.Seq, firstSeq+int64(i))
		}
		reasons[e.Reason] = true
	}
	if len(evs) != want || len(reasons) != want {
		t.Errorf("%d events, %d distinct; want %d", len(evs), len(reasons), want)
	}
}

func TestLedgerContract(t *testing.T) {
	redistest.Each(t, func(t *testing.T, r redistest.Target) {
		storetest.RunLedger(t, func(t *testing.T) tenant.Ledger {
			r.Flush(t)
			return openOn(t, r, Options{}).Ledger()
		})
	})
}

func TestIdleRetention(t *testing.T) {
	redistest.Each(t, func(t *testing.T, r redistest.Target) {
		storetest.RunIdle(t, 200*time.Millisecond, func(t *testing.T) trajectory.Store {
			r.Flush(t)
			return openOn(t, r, Options{IdleRetention: 200 * time.Millisecond})
		})
	})
}

// TestCallingIndexPrune: a listing of the calls in flight drops the
// entries of records no longer calling, but only an entry whose score is
// still the one it read: an entry written again since (the record began
// another call) stays.
func TestCallingIndexPrune(t *testing.T) {
	url := redistest.Start(t)
	rdb := client(t, url)
	s := open(t, url, Options{})
	ctx := context.Background()
	create(t, s, trajectory.New("run-1", "team-a", t0))
	m, key := member("run-1", t0), idxCalling(shardOf("run-1"))
	if err := rdb.ZAdd(ctx, key, goredis.Z{Score: 2, Member: m}).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := pruneCallingScript.Run(ctx, rdb, []string{key}, m, "1").Int(); err != nil || n != 0 {
		t.Fatalf("prune of a rewritten entry: %d, %v", n, err)
	}
	// run-1 is READY: the listing finds nothing and drops its entry.
	recs, err := s.List(ctx, trajectory.Filter{State: trajectory.CallingModel})
	if err != nil || len(recs) != 0 {
		t.Fatalf("listed %v, %v", recs, err)
	}
	if n := rdb.ZCard(ctx, key).Val(); n != 0 {
		t.Errorf("calling index keeps %d entries of a record not calling", n)
	}
}

func TestSpendLimitsContract(t *testing.T) {
	redistest.Each(t, func(t *testing.T, r redistest.Target) {
		storetest.RunSpendLimits(t, func(t *testing.T) spendlimit.Store {
			r.Flush(t)
			return openOn(t, r, Options{}).SpendLimits()
		})
	})
}
