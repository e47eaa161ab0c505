package redis

import (
	"context"
	"errors"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/internal/redistest"
	"gatekeeper/internal/ride"
	"gatekeeper/trajectory"
)

// incr is a rider that counts, in Redis, the pipelines it went in.
type incr struct {
	key string
	cmd *goredis.IntCmd
}

func (r *incr) Queue(ctx context.Context, _ any, p goredis.Pipeliner) bool {
	r.cmd = p.Incr(ctx, r.key)
	return true
}

// A rider goes in the update's own round trip, once however many attempts
// the update makes, and not at all when fn refuses before anything is
// sent.
func TestUpdateRider(t *testing.T) {
	url := redistest.Start(t)
	var c counter
	rdb := client(t, url)
	rdb.AddHook(&c)
	ctx := context.Background()
	s, err := Open(ctx, Options{Client: rdb})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other := open(t, url, Options{})
	create(t, s, trajectory.New("ride-1", "team-a", t0))
	// Dials outside the counts: a new connection's handshake is counted.
	if _, err := s.Update(ride.With(ctx, &incr{key: "rider:warm"}), "ride-1", unfinished); err != nil {
		t.Fatal(err)
	}
	count := func(key string) int64 {
		n, err := rdb.Get(ctx, key).Int64()
		if err != nil && !errors.Is(err, goredis.Nil) {
			t.Fatal(err)
		}
		return n
	}

	tests := []struct {
		name      string
		before    func() // not counted
		fn        func(*trajectory.Record) ([]trajectory.Event, error)
		wantErr   bool
		wantTrips int64
		wantSent  int64
	}{
		{"alone", nil, unfinished, false, 1, 1},
		{"after another replica saved (a conflict, then the retry)", func() {
			if _, err := other.Update(ctx, "ride-1", unfinished); err != nil {
				t.Fatal(err)
			}
		}, unfinished, false, 2, 1},
		{"fn refuses", nil, func(*trajectory.Record) ([]trajectory.Event, error) {
			return nil, errors.New("refused")
		}, true, 0, 0},
	}
	for _, tc := range tests {
		if tc.before != nil {
			tc.before()
		}
		r := &incr{key: "rider:" + tc.name}
		before := c.Load()
		_, err := s.Update(ride.With(ctx, r), "ride-1", tc.fn)
		if (err != nil) != tc.wantErr {
			t.Fatalf("%s: err %v", tc.name, err)
		}
		if got := c.Load() - before; got != tc.wantTrips {
			t.Errorf("%s: %d round trips, want %d", tc.name, got, tc.wantTrips)
		}
		if got := count(r.key); got != tc.wantSent {
			t.Errorf("%s: the rider went in %d pipelines, want %d", tc.name, got, tc.wantSent)
		}
		if tc.wantSent > 0 && (r.cmd == nil || r.cmd.Val() != tc.wantSent) {
			t.Errorf("%s: the rider's own result is not readable after the update", tc.name)
		}
	}
}
