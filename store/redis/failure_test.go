package redis

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"gatekeeper/internal/redistest"
	"gatekeeper/trajectory"
)

func TestClientOwnership(t *testing.T) {
	url := redistest.Start(t)
	rdb := client(t, url)
	ctx := context.Background()
	s, err := Open(ctx, Options{Client: rdb})
	if err != nil {
		t.Fatal(err)
	}
	create(t, s, trajectory.New("run-1", "team-a", t0))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "run-1"); !errors.Is(err, trajectory.ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Errorf("Close closed the caller's client: %v", err)
	}
}

// TestRedisDown stops Redis under a working store: every call must fail
// promptly with an error that says the store is unreachable, never one
// that says the record is missing.
func TestRedisDown(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, srv.URL, Options{})
	create(t, s, trajectory.New("run-1", "team-a", t0))
	create(t, s, child("run-1/a", "run-1"))
	create(t, open(t, srv.URL, Options{}), child("run-1/b", "run-1"))
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	// Refused connections must fail well before the caller's deadline.
	const bound, prompt = 3 * time.Second, time.Second
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Ping", s.Ping},
		{"Get", func(ctx context.Context) error { _, err := s.Get(ctx, "run-1"); return err }},
		// fn may run on this process's copy of the record; the save fails.
		{"Update", func(ctx context.Context) error {
			_, err := s.Update(ctx, "run-1", func(r *trajectory.Record) ([]trajectory.Event, error) {
				r.Turns++
				return nil, nil
			})
			return err
		}},
		{"UpdateChain", func(ctx context.Context) error {
			_, err := s.UpdateChain(ctx, "run-1/a", func(chain []*trajectory.Record) ([]trajectory.Event, error) {
				chain[1].Turns++
				return nil, nil
			})
			return err
		}},
		{"UpdateChain of a record this process never saw", func(ctx context.Context) error {
			_, err := s.UpdateChain(ctx, "run-1/b", func([]*trajectory.Record) ([]trajectory.Event, error) {
				t.Error("fn ran without a record")
				return nil, nil
			})
			return err
		}},
		{"Create", func(ctx context.Context) error { return s.Create(ctx, trajectory.New("run-2", "team-a", t0)) }},
		{"AppendEvents", func(ctx context.Context) error { return s.AppendEvents(ctx, "run-1", turnEvent("")) }},
		{"Events", func(ctx context.Context) error { _, err := s.Events(ctx, "run-1", 0, 0); return err }},
		{"List", func(ctx context.Context) error { _, err := s.List(ctx, trajectory.Filter{}); return err }},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			start := time.Now()
			err := tc.call(ctx)
			elapsed := time.Since(start)
			if err == nil || errors.Is(err, trajectory.ErrNotFound) || !errors.Is(err, ErrUnavailable) {
				t.Errorf("%s with Redis down: %v; want ErrUnavailable, not ErrNotFound", tc.name, err)
			}
			if !errors.Is(err, trajectory.ErrUnavailable) {
				t.Errorf("%s with Redis down: %v does not match trajectory.ErrUnavailable", tc.name, err)
			}
			if elapsed >= prompt {
				t.Errorf("%s took %v", tc.name, elapsed)
			}
			t.Logf("%s failed in %v: %v", tc.name, elapsed.Round(time.Millisecond), err)
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if _, err := Open(ctx, Options{URL: srv.URL}); !errors.Is(err, ErrUnavailable) || !errors.Is(err, trajectory.ErrUnavailable) {
		t.Errorf("Open with Redis down: %v, want ErrUnavailable", err)
	}
}

// TestRedisUnresponsive points the store at a server that accepts
// connections and never answers: the caller's deadline bounds each call.
func TestRedisUnresponsive(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Go(func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, never answered
		}
	})
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	_, err = Open(ctx, Options{URL: "redis://" + ln.Addr().String() + "/0"})
	elapsed := time.Since(start)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Open against a silent server: %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if elapsed > deadline+time.Second {
		t.Errorf("Open took %v with a %v deadline", elapsed, deadline)
	}
}

func TestOpenRefusesBadURL(t *testing.T) {
	for _, u := range []string{
		"http://user:hunter2@127.0.0.1:1/0",
		"redis://user:hunter2@127.0.0.1:1/notadb",
		"redis://user:hunter2@127.0.0.1:port/0",
		"redis://user:hunter2@[::1/0",
	} {
		_, err := Open(context.Background(), Options{URL: u})
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%s): %v; want an error that does not echo the password", u, err)
		}
	}
}
