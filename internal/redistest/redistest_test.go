package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

func TestServerLifecycle(t *testing.T) {
	s := StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opts, err := goredis.ParseURL(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	opts.MaxRetries = -1
	c := goredis.NewClient(opts)
	defer c.Close()

	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	s.Flush(t)
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after Flush: EXISTS = %d, %v", n, err)
	}
	// Nothing is persisted: a test leaves no dump behind.
	if cfg, err := c.ConfigGet(ctx, "save").Result(); err != nil || cfg["save"] != "" {
		t.Errorf("CONFIG GET save = %v, %v; want empty", cfg, err)
	}

	pid := s.cmd.Process.Pid
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Stop")
	}
	if s.cmd.ProcessState == nil || s.cmd.ProcessState.Pid() != pid {
		t.Fatalf("process %d not reaped: %v", pid, s.cmd.ProcessState)
	}
}

func TestServersAreSeparate(t *testing.T) {
	a, b := StartServer(t), StartServer(t)
	if a.URL == b.URL {
		t.Fatalf("two servers share %s", a.URL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca := goredis.NewClient(&goredis.Options{Addr: a.Addr})
	defer ca.Close()
	cb := goredis.NewClient(&goredis.Options{Addr: b.Addr})
	defer cb.Close()
	if err := ca.Set(ctx, "only-a", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := cb.Exists(ctx, "only-a").Result(); err != nil || n != 0 {
		t.Errorf("b sees a's key: %d, %v", n, err)
	}
}

// TestCluster forms a cluster, spreads keys over its three masters through
// a cluster client, and flushes them all.
func TestCluster(t *testing.T) {
	c := StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := Target{URL: c.URL, Cluster: true}
	cl := r.Client(t)
	for i := range 60 {
		if err := cl.Set(ctx, fmt.Sprintf("k%d", i), "v", 0).Err(); err != nil {
			t.Fatalf("SET through the cluster client: %v", err)
		}
	}
	// A multi-key command across slots is refused, as on any cluster.
	if err := cl.Do(ctx, "MSET", "{a}x", "1", "{b}y", "2").Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Errorf("MSET across slots: %v, want CROSSSLOT", err)
	}
	for _, s := range c.Servers {
		n := nodeKeys(t, ctx, s.Addr)
		if n == 0 {
			t.Errorf("node %s holds no key of 60: the slots are not spread", s.Addr)
		}
	}
	c.Flush(t)
	for _, s := range c.Servers {
		if n := nodeKeys(t, ctx, s.Addr); n != 0 {
			t.Errorf("node %s holds %d keys after Flush", s.Addr, n)
		}
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Get(ctx, "k1").Err(); err == nil {
		t.Fatal("GET answered after Stop")
	}
}

func nodeKeys(t *testing.T, ctx context.Context, addr string) int64 {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	n, err := c.DBSize(ctx).Result()
	if err != nil {
		t.Fatalf("DBSIZE %s: %v", addr, err)
	}
	return n
}

// RoundTrips counts a command and a pipeline one each, and not the
// handshake of the connections the pool opens for them.
func TestRoundTripsSkipsHandshakes(t *testing.T) {
	s := StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opts, err := goredis.ParseURL(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opts)
	defer c.Close()
	rt := &RoundTrips{}
	c.AddHook(rt)
	if err := c.Ping(ctx).Err(); err != nil { // dials: the handshake first
		t.Fatal(err)
	}
	if got := rt.Load(); got != 1 {
		t.Errorf("a first command on a new connection counted %d round trips, want 1", got)
	}
	pipe := c.Pipeline()
	pipe.Ping(ctx)
	pipe.Ping(ctx)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rt.Load(); got != 2 {
		t.Errorf("a command and a pipeline counted %d round trips, want 2", got)
	}
}
