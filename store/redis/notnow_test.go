package redis

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/approvals"
	"gatekeeper/internal/redistest"
	"gatekeeper/trajectory"
)

// waitReply sends PING on c until its error reply starts with prefix, up
// to 500 times, 10 ms apart.
func waitReply(t *testing.T, c goredis.UniversalClient, prefix string) {
	t.Helper()
	var err error
	for range 500 {
		if err = c.Ping(context.Background()).Err(); err != nil && strings.HasPrefix(err.Error(), prefix) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the server never answered %s; last PING: %v", prefix, err)
}

// checkUnavailable asserts that err says the store is unavailable (so a
// caller retries it and fails closed) and carries Redis's own reason.
func checkUnavailable(t *testing.T, what string, err error, reason string) {
	t.Helper()
	if !errors.Is(err, trajectory.ErrUnavailable) || !strings.Contains(err.Error(), reason) {
		t.Errorf("%s: %v; want trajectory.ErrUnavailable carrying %s", what, err, reason)
	}
}

// TestNotNowReplies brings a real redis-server into each state in which it
// answers "not now", and checks that the stores report it as unavailable,
// never as a permanent failure, while a reply that can never succeed stays
// permanent.
func TestNotNowReplies(t *testing.T) {
	ctx := context.Background()
	call, _ := approvals.Canonical("Bash", []byte(`{}`))
	hold := func(id string) (*approvals.Hold, []*approvals.Request) {
		h := &approvals.Hold{ID: "hold_" + id, Trajectory: id, Root: id, Key: "k", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
		r := &approvals.Request{ID: "apr_" + id, Trajectory: id, Root: id, Call: call, Digest: call.Digest(), State: approvals.Pending,
			CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
		return h, []*approvals.Request{r}
	}

	t.Run("READONLY from a replica", func(t *testing.T) {
		primary := redistest.StartServer(t)
		replica := redistest.StartServer(t)
		rc := client(t, replica.URL)
		host, port, _ := net.SplitHostPort(primary.Addr)
		if err := rc.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
			t.Fatal(err)
		}
		s := open(t, replica.URL, Options{})
		err := s.Create(ctx, trajectory.New("run-1", "team-a", t0))
		checkUnavailable(t, "Create on a replica", err, "READONLY")
		a := NewApprovals(ApprovalsOptions{Client: rc})
		h, reqs := hold("run-2")
		_, err = a.CreateHold(ctx, h, reqs)
		checkUnavailable(t, "CreateHold on a replica", err, "READONLY")
	})

	t.Run("LOADING", func(t *testing.T) {
		srv := redistest.StartServer(t, "--enable-debug-command", "yes")
		c := client(t, srv.URL)
		s := open(t, srv.URL, Options{})
		create(t, s, trajectory.New("run-1", "team-a", t0))
		// A reload that takes a while and answers clients meanwhile, as a
		// restart from a large dataset does.
		for _, kv := range [][2]string{{"key-load-delay", "50"}, {"loading-process-events-interval-bytes", "1024"}} {
			if err := c.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Do(ctx, "DEBUG", "POPULATE", 20000).Err(); err != nil {
			t.Fatal(err)
		}
		reloaded := make(chan error, 1)
		go func() {
			rc := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1, ReadTimeout: -1})
			defer rc.Close()
			reloaded <- rc.Do(ctx, "DEBUG", "RELOAD").Err()
		}()
		waitReply(t, c, "LOADING")
		_, err := s.Get(ctx, "run-1")
		checkUnavailable(t, "Get while loading", err, "LOADING")
		_, err = s.Update(ctx, "run-1", func(r *trajectory.Record) ([]trajectory.Event, error) { r.Turns++; return nil, nil })
		checkUnavailable(t, "Update while loading", err, "LOADING")
		if err := <-reloaded; err != nil {
			t.Fatalf("DEBUG RELOAD: %v", err)
		}
		if _, err := s.Get(ctx, "run-1"); err != nil {
			t.Errorf("Get once loaded: %v", err)
		}
	})

	t.Run("BUSY", func(t *testing.T) {
		srv := redistest.StartServer(t)
		c := client(t, srv.URL)
		s := open(t, srv.URL, Options{})
		create(t, s, trajectory.New("run-1", "team-a", t0))
		if err := c.ConfigSet(ctx, "busy-reply-threshold", "50").Err(); err != nil {
			t.Fatal(err)
		}
		// A script that runs until killed, having written nothing, holds
		// the server.
		busy := make(chan error, 1)
		go func() {
			bc := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1, ReadTimeout: -1})
			defer bc.Close()
			busy <- bc.Eval(ctx, "while true do redis.call('TIME') end", nil).Err()
		}()
		waitReply(t, c, "BUSY")
		_, err := s.Get(ctx, "run-1")
		checkUnavailable(t, "Get while a script runs", err, "BUSY")
		a := NewApprovals(ApprovalsOptions{Client: c})
		_, err = a.Get(ctx, "apr_1")
		checkUnavailable(t, "approvals Get while a script runs", err, "BUSY")
		if err := c.Do(ctx, "SCRIPT", "KILL").Err(); err != nil {
			t.Fatal(err)
		}
		if err := <-busy; err == nil {
			t.Error("the killed script answered no error")
		}
	})

	t.Run("permanent", func(t *testing.T) {
		srv := redistest.StartServer(t)
		c := client(t, srv.URL)
		s := open(t, srv.URL, Options{})
		// A record key holding another type can never be read as a record.
		if err := c.Set(ctx, recKey("run-1"), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := s.Get(ctx, "run-1")
		if err == nil || errors.Is(err, trajectory.ErrUnavailable) || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("Get of a key of another type: %v, want a permanent WRONGTYPE error", err)
		}
	})
}
