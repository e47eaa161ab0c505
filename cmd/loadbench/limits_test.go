package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"gatekeeper/internal/redistest"
)

// Past 4000 requests in the mock's minute (its default advertised limit),
// gatekeeper on Redis with key limits goes on serving turns: the mock
// advertises the key's own limits (benchRPM, benchTPM) and its headers
// report all of them left (roomyLimits). When it advertised 4000, every
// turn after that waited out rate_limits.max_wait for the window to end.
func TestMockWindowDoesNotStall(t *testing.T) {
	srv := redistest.StartServer(t)
	b, err := start(params{conns: 8, streams: 1, redisURL: srv.URL, settleWindow: 2 * time.Millisecond, keyLimits: true}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.close(); err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The mock's window filled through the bare proxy, as a bench's
	// bare rounds fill it.
	const workers, each = 8, 4000/8 + 1
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			body := messagesBody(false, fmt.Sprintf("fill %d", w))
			for range each {
				if _, err := b.smallTurn(ctx, b.targets[bareIdx], body, ""); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("filling the mock's window: %v", err)
	}
	body := messagesBody(false, "past the window")
	for i := range 5 {
		// Time for the previous turn's key settle, which syncs the
		// key with the mock's headers, to be flushed.
		time.Sleep(20 * time.Millisecond)
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := b.smallTurn(tctx, b.targets[gkIdx], body, "past-window")
		cancel()
		if err != nil {
			t.Fatalf("turn %d through gatekeeper past the mock's window: %v", i+1, err)
		}
	}
}
