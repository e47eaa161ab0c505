package redis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"gatekeeper/internal/redistest"
	"gatekeeper/trajectory"
)

// wait bounds every wait for a signal or a closed channel.
const wait = 5 * time.Second

func receive(t testing.TB, name string, ch <-chan trajectory.Signal) trajectory.Signal {
	t.Helper()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case sig, ok := <-ch:
		if !ok {
			t.Fatalf("%s: channel closed, want a signal", name)
		}
		return sig
	case <-timer.C:
		t.Fatalf("%s: no signal after %v", name, wait)
	}
	return trajectory.Signal{}
}

// closed waits for ch to close, and returns how many signals it still held.
func closed(t testing.TB, name string, ch <-chan trajectory.Signal) int {
	t.Helper()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for n := 0; ; n++ {
		select {
		case _, ok := <-ch:
			if !ok {
				return n
			}
		case <-timer.C:
			t.Fatalf("%s: channel still open %v after its subscription ended", name, wait)
		}
	}
}

func subscribe(t testing.TB, s *Store, ctx context.Context) <-chan trajectory.Signal {
	t.Helper()
	ch, err := s.Subscribe(ctx)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	return ch
}

// TestSignalsAcrossReplicas runs two Stores on one Redis, and on one
// cluster, as two replicas would: a signal published on either reaches
// every subscriber of both, and ending the subscriptions leaves no
// goroutine behind.
func TestSignalsAcrossReplicas(t *testing.T) {
	redistest.Each(t, testSignalsAcrossReplicas)
}

func testSignalsAcrossReplicas(t *testing.T, r redistest.Target) {
	a := openOn(t, r, Options{})
	b := openOn(t, r, Options{})
	ignore := goleak.IgnoreCurrent()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	subs := map[string]<-chan trajectory.Signal{
		"a1": subscribe(t, a, ctx),
		"a2": subscribe(t, a, ctx),
		"b1": subscribe(t, b, ctx),
	}
	tests := []struct {
		name string
		from *Store
		sig  trajectory.Signal
	}{
		{"from a", a, trajectory.Signal{ID: "run-1/ab", Kind: trajectory.ControlCancel}},
		{"from b", b, trajectory.Signal{ID: "run-2", Kind: trajectory.ControlKill}},
		{"unknown kind", a, trajectory.Signal{ID: "run-3", Kind: "later"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Subscribe returned, so the subscription is confirmed: no
			// wait is needed before publishing.
			if err := tc.from.Publish(context.Background(), tc.sig); err != nil {
				t.Fatal(err)
			}
			for name, ch := range subs {
				if got := receive(t, name, ch); got != tc.sig {
					t.Errorf("%s got %+v, want %+v", name, got, tc.sig)
				}
			}
		})
	}
	want := SignalStats{Delivered: uint64(2 * len(tests))}
	if got := a.SignalStats(); got != want {
		t.Errorf("a counted %+v, want %+v", got, want)
	}

	cancel()
	for name, ch := range subs {
		if n := closed(t, name, ch); n != 0 {
			t.Errorf("%s held %d signals after all were read", name, n)
		}
	}
	goleak.VerifyNone(t, ignore)
}

// TestSignalsMalformed publishes on the channel what no replica would:
// each message is counted and ignored, and the subscription goes on.
func TestSignalsMalformed(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, srv.URL, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := subscribe(t, s, ctx)

	raw := client(t, srv.URL)
	bad := []string{"", "not json", "null", "[]", `{"id":"run-1"}`, `{"kind":"kill"}`, `{"id":7,"kind":"kill"}`, `{"id":"run-1","kind":"kill"`}
	for _, p := range bad {
		if err := raw.Publish(ctx, signalChannel, p).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Redis delivers one connection's messages in the order it ran the
	// PUBLISHes, so once this arrives every malformed one was read.
	want := trajectory.Signal{ID: "run-1", Kind: trajectory.ControlPause}
	if err := s.Publish(ctx, want); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, "subscriber", ch); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got, want := s.SignalStats(), (SignalStats{Delivered: 1, Malformed: uint64(len(bad))}); got != want {
		t.Errorf("counted %+v, want %+v", got, want)
	}
}

// TestSignalsBurst sends far more signals than a subscriber that does not
// read can hold: the publisher is never held up, the reader keeps the
// oldest buffer's worth, and the rest is counted as dropped.
func TestSignalsBurst(t *testing.T) {
	const burst = 1000
	srv := redistest.StartServer(t)
	a := open(t, srv.URL, Options{})
	b := open(t, srv.URL, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow := subscribe(t, b, ctx)

	pubCtx, pubCancel := context.WithTimeout(context.Background(), 2*wait)
	defer pubCancel()
	for i := range burst {
		if err := a.Publish(pubCtx, trajectory.Signal{ID: fmt.Sprintf("run-%d", i), Kind: trajectory.ControlKill}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	// Wait, boundedly, for the subscription to have read the whole burst.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(2 * wait)
	defer deadline.Stop()
	for st := b.SignalStats(); st.Delivered+st.Dropped < burst; st = b.SignalStats() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("the subscription read %+v of %d signals", st, burst)
		}
	}
	if got, want := b.SignalStats(), (SignalStats{Delivered: signalBuffer, Dropped: burst - signalBuffer}); got != want {
		t.Errorf("counted %+v, want %+v", got, want)
	}
	var ids []string
	for range signalBuffer {
		ids = append(ids, receive(t, "slow reader", slow).ID)
	}
	for i, id := range ids {
		if want := fmt.Sprintf("run-%d", i); id != want {
			t.Fatalf("signal %d is %s, want %s: a full buffer keeps the oldest", i, id, want)
		}
	}
	cancel()
	if n := closed(t, "slow reader", slow); n != 0 {
		t.Errorf("%d signals past the buffer of %d", n, signalBuffer)
	}
}

// holdingProxy forwards loopback TCP to Redis, but holds the first chunk
// a client sends that carries a SUBSCRIBE until Release.
type holdingProxy struct {
	addr        string
	held        chan struct{} // closed when the SUBSCRIBE is held
	release     chan struct{}
	releaseOnce sync.Once
}

// Release lets the held SUBSCRIBE through; it may be called more than once.
func (p *holdingProxy) Release() { p.releaseOnce.Do(func() { close(p.release) }) }

func startHoldingProxy(t *testing.T, redisAddr string) *holdingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdingProxy{addr: ln.Addr().String(), held: make(chan struct{}), release: make(chan struct{})}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		conns    []net.Conn
		holdOnce sync.Once
	)
	track := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, c)
	}
	t.Cleanup(func() {
		p.Release()
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", redisAddr)
			if err != nil {
				_ = in.Close()
				continue
			}
			track(in)
			track(out)
			wg.Go(func() { _, _ = io.Copy(in, out) })
			wg.Go(func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := in.Read(buf)
					if n > 0 && bytes.Contains(bytes.ToLower(buf[:n]), []byte("subscribe")) {
						holdOnce.Do(func() {
							close(p.held)
							<-p.release
						})
					}
					if n > 0 {
						if _, err := out.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						_ = out.Close()
						return
					}
				}
			})
		}
	})
	return p
}

// TestSubscribeConfirmed holds the SUBSCRIBE on its way to Redis:
// Subscribe must wait for it to arrive, so that when it returns Redis
// counts the subscriber and a signal published at once reaches it.
func TestSubscribeConfirmed(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := startHoldingProxy(t, srv.Addr)
	sub := open(t, "redis://"+proxy.addr+"/0", Options{})
	pub := open(t, srv.URL, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	type result struct {
		ch  <-chan trajectory.Signal
		err error
	}
	done := make(chan result, 1)
	go func() {
		ch, err := sub.Subscribe(ctx)
		done <- result{ch, err}
	}()
	select {
	case <-proxy.held:
	case r := <-done:
		t.Fatalf("Subscribe returned (%v) without sending SUBSCRIBE", r.err)
	case <-time.After(wait):
		t.Fatal("no SUBSCRIBE sent")
	}
	// A Subscribe that returned now would return before Redis knew of
	// the subscription. No wait can prove it will not return later; this
	// one catches any that returns right after writing the command.
	select {
	case <-done:
		t.Fatal("Subscribe returned while Redis had not received the SUBSCRIBE")
	case <-time.After(100 * time.Millisecond):
	}
	proxy.Release()
	var r result
	select {
	case r = <-done:
	case <-time.After(wait):
		t.Fatal("Subscribe did not return once the SUBSCRIBE went through")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	n, err := client(t, srv.URL).PubSubNumSub(ctx, signalChannel).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n[signalChannel] != 1 {
		t.Errorf("Redis counts %d subscribers right after Subscribe returned, want 1", n[signalChannel])
	}
	want := trajectory.Signal{ID: "run-1", Kind: trajectory.ControlKill}
	if err := pub.Publish(ctx, want); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, "subscriber", r.ch); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestSignalsEnd covers the ways a subscription ends or cannot start.
func TestSignalsEnd(t *testing.T) {
	srv := redistest.StartServer(t)
	sig := trajectory.Signal{ID: "run-1", Kind: trajectory.ControlCancel}

	t.Run("context already done", func(t *testing.T) {
		s := open(t, srv.URL, Options{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := s.Subscribe(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Subscribe: %v, want context.Canceled", err)
		}
		if err := s.Publish(ctx, sig); !errors.Is(err, context.Canceled) {
			t.Errorf("Publish: %v, want context.Canceled", err)
		}
	})
	t.Run("store closed", func(t *testing.T) {
		// The client is the caller's, so only the Store can end the
		// subscription: Close must.
		s, err := Open(context.Background(), Options{Client: client(t, srv.URL)})
		if err != nil {
			t.Fatal(err)
		}
		ignore := goleak.IgnoreCurrent()
		ch := subscribe(t, s, context.Background())
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		closed(t, "subscriber", ch)
		if _, err := s.Subscribe(context.Background()); !errors.Is(err, trajectory.ErrClosed) {
			t.Errorf("Subscribe after Close: %v, want ErrClosed", err)
		}
		if err := s.Publish(context.Background(), sig); !errors.Is(err, trajectory.ErrClosed) {
			t.Errorf("Publish after Close: %v, want ErrClosed", err)
		}
		goleak.VerifyNone(t, ignore)
	})
}

// TestSignalsRedisDown stops Redis under a live subscription: Publish and
// Subscribe fail promptly as unavailable, and the subscription, which
// go-redis keeps trying to reconnect, still ends with its context.
func TestSignalsRedisDown(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, srv.URL, Options{})
	ignore := goleak.IgnoreCurrent()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := subscribe(t, s, ctx)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}

	const prompt = time.Second
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Publish", func(ctx context.Context) error {
			return s.Publish(ctx, trajectory.Signal{ID: "run-1", Kind: trajectory.ControlKill})
		}},
		{"Subscribe", func(ctx context.Context) error {
			sub, err := s.Subscribe(ctx)
			if sub != nil {
				t.Error("a channel with the error")
			}
			return err
		}},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			cctx, ccancel := context.WithTimeout(context.Background(), wait)
			defer ccancel()
			start := time.Now()
			err := tc.call(cctx)
			elapsed := time.Since(start)
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, trajectory.ErrUnavailable) {
				t.Errorf("%s with Redis down: %v, want ErrUnavailable", tc.name, err)
			}
			if elapsed >= prompt {
				t.Errorf("%s took %v", tc.name, elapsed)
			}
		})
	}
	cancel()
	closed(t, "subscriber", ch)
	goleak.VerifyNone(t, ignore)
}

func TestDecodeSignal(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		want    trajectory.Signal
		ok      bool
	}{
		{"signal", `{"id":"run-1/ab","kind":"cancel"}`, trajectory.Signal{ID: "run-1/ab", Kind: trajectory.ControlCancel}, true},
		{"unknown field", `{"id":"run-1","kind":"kill","by":"ops"}`, trajectory.Signal{ID: "run-1", Kind: trajectory.ControlKill}, true},
		{"unknown kind", `{"id":"run-1","kind":"later"}`, trajectory.Signal{ID: "run-1", Kind: "later"}, true},
		{"no id", `{"kind":"kill"}`, trajectory.Signal{}, false},
		{"no kind", `{"id":"run-1"}`, trajectory.Signal{}, false},
		{"null", `null`, trajectory.Signal{}, false},
		{"array", `[1]`, trajectory.Signal{}, false},
		{"wrong type", `{"id":1,"kind":"kill"}`, trajectory.Signal{}, false},
		{"cut short", `{"id":"run-1","kind":"ki`, trajectory.Signal{}, false},
		{"empty", ``, trajectory.Signal{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := decodeSignal(tc.payload)
			if got != tc.want || ok != tc.ok {
				t.Errorf("decodeSignal(%q) = %+v, %v; want %+v, %v", tc.payload, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// FuzzDecodeSignal feeds payloads as anyone with access to Redis could
// publish them: a payload is refused, or is a signal that encodes back to
// one decoding the same.
func FuzzDecodeSignal(f *testing.F) {
	f.Add(`{"id":"run-1/ab","kind":"cancel"}`)
	f.Add(`{"id":"run-1","kind":"kill","id":"run-2"}`)
	f.Add(`{"id":"\u0000","kind":"\ud800"}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, payload string) {
		sig, ok := decodeSignal(payload)
		if !ok {
			if sig != (trajectory.Signal{}) {
				t.Fatalf("refused %q but returned %+v", payload, sig)
			}
			return
		}
		if sig.ID == "" || sig.Kind == "" {
			t.Fatalf("accepted %q as %+v", payload, sig)
		}
		b, err := encodeSignal(sig)
		if err != nil {
			t.Fatal(err)
		}
		again, ok := decodeSignal(b)
		if !ok || again != sig {
			t.Fatalf("%+v encoded as %s decodes to %+v, %v", sig, b, again, ok)
		}
	})
}

// BenchmarkSignalLatency times a signal from Publish on one replica to its
// arrival on another's subscription, and reports the median and 99th
// percentile over the iterations.
func BenchmarkSignalLatency(b *testing.B) {
	srv := redistest.StartServer(b)
	pub := open(b, srv.URL, Options{})
	sub := open(b, srv.URL, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := subscribe(b, sub, ctx)
	sig := trajectory.Signal{ID: "run-1/ab", Kind: trajectory.ControlCancel}
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := pub.Publish(ctx, sig); err != nil {
			b.Fatal(err)
		}
		receive(b, "replica B", ch)
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	pct := func(p int) float64 {
		return float64(lat[(len(lat)-1)*p/100].Nanoseconds()) / 1e3
	}
	b.ReportMetric(pct(50), "p50-µs")
	b.ReportMetric(pct(99), "p99-µs")
}
