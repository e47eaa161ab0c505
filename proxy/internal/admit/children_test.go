package admit

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/config"
	"gatekeeper/internal/redistest"
	"gatekeeper/store/memory"
	redisstore "gatekeeper/store/redis"
	"gatekeeper/trajectory"
)

// TestThreadsAtOnceKeepMaxChildren: the first calls of many threads of
// one run, all at once, never create more than max_children child
// records, on the memory store and on a real Redis: each thread is given
// its own child while there is room and the last child once there is
// none, and a thread given its own child is among the run's children.
func TestThreadsAtOnceKeepMaxChildren(t *testing.T) {
	stores := map[string]func(t *testing.T) trajectory.Store{
		"memory": func(t *testing.T) trajectory.Store {
			st := memory.New(memory.Options{Clock: fixedNow})
			t.Cleanup(func() { _ = st.Close() })
			return st
		},
		"redis": func(t *testing.T) trajectory.Store {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := redisstore.Open(ctx, redisstore.Options{URL: redistest.Start(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			const threads, bound = 16, 3
			r := &Records{Store: open(t), Now: fixedNow, Log: slog.New(slog.DiscardHandler), MaxChildren: bound}
			ctx := context.Background()
			if _, err := r.Root(ctx, "run", true, &config.Tenant{Name: "team-a"}); err != nil {
				t.Fatal(err)
			}
			type placed struct {
				id     string
				shared bool
				err    error
			}
			got := make([]placed, threads)
			var wg sync.WaitGroup
			for i := range threads {
				wg.Go(func() {
					id, shared, err := r.Thread(ctx, "run", "team-a", fmt.Sprintf("run/t%d", i), fmt.Sprintf("k%d", i))
					got[i] = placed{id, shared, err}
				})
			}
			wg.Wait()
			root, err := r.Store.Get(ctx, "run")
			if err != nil {
				t.Fatal(err)
			}
			own := 0
			for i, p := range got {
				switch {
				case p.err != nil:
					t.Errorf("thread %d: %v", i, p.err)
				case !slices.Contains(root.Children, p.id):
					t.Errorf("thread %d placed on %s, not a child of the run %v", i, p.id, root.Children)
				case !p.shared:
					own++
				}
			}
			if len(root.Children) != bound || own != bound {
				t.Errorf("%d threads at once under max_children %d: the run has %d children %v, %d threads have their own",
					threads, bound, len(root.Children), root.Children, own)
			}
		})
	}
}

// TestThreadChildRoundTrips: on Redis a new thread's child record costs
// two round trips: the look for it, and its creation with the parent's
// bound checked in the same script. The parent is not read first.
func TestThreadChildRoundTrips(t *testing.T) {
	rt := &redistest.RoundTrips{}
	opt, err := goredis.ParseURL(redistest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	client := goredis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	client.AddHook(rt)
	ctx := context.Background()
	st, err := redisstore.Open(ctx, redisstore.Options{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	r := &Records{Store: st, Now: fixedNow, Log: slog.New(slog.DiscardHandler), MaxChildren: 3}
	if _, err := r.Root(ctx, "run", true, &config.Tenant{Name: "team-a"}); err != nil {
		t.Fatal(err)
	}
	// The first child loads the create script.
	if _, _, err := r.Thread(ctx, "run", "team-a", "run/t0", "k0"); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{2, 2, 2} { // two with room, then one sharing the last
		before := rt.Load()
		if _, _, err := r.Thread(ctx, "run", "team-a", fmt.Sprintf("run/t%d", i+1), fmt.Sprintf("k%d", i+1)); err != nil {
			t.Fatal(err)
		}
		if got := rt.Load() - before; got != want {
			t.Errorf("thread %d cost %d round trips, want %d", i+1, got, want)
		}
	}
}
