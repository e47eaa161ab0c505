package redis

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/approvals"
	"gatekeeper/internal/redistest"
	"gatekeeper/trajectory"
)

// TestMigrateLegacyIndexes starts a Store on a Redis whose records are
// indexed as earlier versions did, in one pair of keys: Open moves every
// entry into its slot's index, so List still finds every record, and
// deletes the legacy keys.
func TestMigrateLegacyIndexes(t *testing.T) {
	url := redistest.Start(t)
	rdb := client(t, url)
	ctx := context.Background()
	s := open(t, url, Options{Retention: time.Hour})
	ids := []string{"run-1", "run-2", "run-3"}
	for i, id := range ids {
		create(t, s, trajectory.New(id, "team-a", t0.Add(time.Duration(i)*time.Minute)))
	}
	create(t, s, child("run-1/a", "run-1"))
	finish(t, s, "run-2")
	// Rewrite the indexes as an earlier version left them.
	created, expires := indexed(t, s, idxCreated), indexed(t, s, idxExpires)
	score, err := rdb.ZScore(ctx, expiresOf("run-2"), expires[0]).Result()
	if err != nil || len(expires) != 1 {
		t.Fatalf("expiry index %v: %v", expires, err)
	}
	shards, err := s.dir.shards(ctx, s.rdb)
	if err != nil {
		t.Fatal(err)
	}
	pipe := rdb.Pipeline()
	for _, sh := range shards {
		pipe.Del(ctx, idxCreated(sh), idxExpires(sh))
	}
	pipe.Del(ctx, recordSlots)
	for _, m := range created {
		pipe.ZAdd(ctx, legacyCreated, goredis.Z{Member: m})
	}
	pipe.ZAdd(ctx, legacyExpires, goredis.Z{Score: score, Member: expires[0]})
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}

	after := open(t, url, Options{})
	recs, err := after.List(ctx, trajectory.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.ID)
	}
	if want := []string{"run-3", "run-2", "run-1", "run-1/a"}; !slices.Equal(got, want) {
		t.Errorf("listed %v, want %v", got, want)
	}
	if n, err := rdb.Exists(ctx, legacyCreated, legacyExpires).Result(); err != nil || n != 0 {
		t.Errorf("%d legacy index keys left (%v)", n, err)
	}
	if got := indexed(t, after, idxCreated); !slices.Equal(got, created) {
		t.Errorf("created indexes %v, want %v", got, created)
	}
	if moved, err := rdb.ZScore(ctx, expiresOf("run-2"), expires[0]).Result(); err != nil || moved != score {
		t.Errorf("expiry entry moved with score %v (%v), want %v", moved, err, score)
	}
}

// TestLegacyLookup: a request held before an upgrade is found by its id
// through the lookup key earlier versions wrote.
func TestLegacyLookup(t *testing.T) {
	url := redistest.Start(t)
	rdb := client(t, url)
	ctx := context.Background()
	a := NewApprovals(ApprovalsOptions{Client: rdb})
	call, _ := approvals.Canonical("Bash", []byte(`{}`))
	h := &approvals.Hold{ID: "hold_old", Trajectory: "run-1", Root: "run-1", Key: "k", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	r := &approvals.Request{ID: "apr_old", Trajectory: "run-1", Root: "run-1", Call: call, Digest: call.Digest(),
		State: approvals.Pending, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	if _, err := a.CreateHold(ctx, h, []*approvals.Request{r}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"hold_old", "apr_old"} {
		if err := rdb.Rename(ctx, locKey(id), legacyLocKey(id)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := a.Get(ctx, "apr_old"); err != nil || got.ID != "apr_old" {
		t.Errorf("Get through the legacy lookup: %v, %v", got, err)
	}
	if got, err := a.GetHold(ctx, "hold_old"); err != nil || got.ID != "hold_old" {
		t.Errorf("GetHold through the legacy lookup: %v, %v", got, err)
	}
	// Its entry in the expiry index of earlier versions still makes it
	// due.
	if err := rdb.Rename(ctx, dueIndex("run-1"), legacyDue).Err(); err != nil {
		t.Fatal(err)
	}
	due, err := a.Due(ctx, t0.Add(2*time.Hour), 0)
	if err != nil || len(due) != 1 || due[0].ID != "apr_old" {
		t.Errorf("Due with a legacy entry: %v, %v", due, err)
	}
	if _, err := a.Get(ctx, "apr_none"); !errors.Is(err, approvals.ErrNotFound) {
		t.Errorf("Get of an unknown id: %v, want ErrNotFound", err)
	}
}

// TestDirectoryRestored: when the slot directory loses an entry (a
// failover to a replica that lagged), the slot's next create puts it back,
// so List finds the slot's records again.
func TestDirectoryRestored(t *testing.T) {
	url := redistest.Start(t)
	rdb := client(t, url)
	ctx := context.Background()
	s := open(t, url, Options{})
	create(t, s, trajectory.New("run-1", "team-a", t0))
	if err := rdb.Del(ctx, recordSlots).Err(); err != nil {
		t.Fatal(err)
	}
	if recs, err := s.List(ctx, trajectory.Filter{}); err != nil || len(recs) != 0 {
		t.Fatalf("List without the directory: %v, %v; want nothing (the test's premise)", recs, err)
	}
	create(t, s, child("run-1/a", "run-1"))
	recs, err := s.List(ctx, trajectory.Filter{})
	if err != nil || len(recs) != 2 {
		t.Errorf("List after the slot's next create: %v, %v; want both records", recs, err)
	}
}
