package ratelimit

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

var oneKey = []Key{{ID: "p/k", Limits: minute(Limits{RPM: 60, InputTPM: 6000})}}

func TestAcquireFastPath(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	obs := newRecorder()
	s := New(Options{Buckets: NewMemory(clk.Now), Clock: clk.Now, Observer: obs})
	defer s.Close()

	g, err := s.Acquire(ctx, Interactive, oneKey, Cost{Requests: 1, Input: 1500})
	if err != nil {
		t.Fatal(err)
	}
	if g.Key.ID != "p/k" || g.Waited != 0 {
		t.Fatalf("grant on %s after %s, want p/k at once", g.Key.ID, g.Waited)
	}
	if pools(s) != 0 {
		t.Fatal("a fast-path turn left a pool behind")
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.lengths) != 0 {
		t.Fatalf("a fast-path turn was queued: lengths %v", obs.lengths)
	}
	if w := obs.waits[Interactive]; len(w) != 1 || w[0] != 0 {
		t.Fatalf("waits %v, want one of 0", w)
	}
	if h := obs.headroom["p/k"]; h < 0.74 || h > 0.76 {
		t.Fatalf("headroom %v after taking 1500 of 6000, want 0.75", h)
	}
}

func TestAcquireMostHeadroom(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	keys := []Key{
		{ID: "p/a", Limits: minute(Limits{InputTPM: 1000})},
		{ID: "p/b", Limits: minute(Limits{InputTPM: 1000})},
		{ID: "p/c", Limits: minute(Limits{InputTPM: 1000})},
	}
	mustTake(t, m, keys[0], Cost{Input: 500})
	mustTake(t, m, keys[1], Cost{Input: 100})
	mustTake(t, m, keys[2], Cost{Input: 300})
	s := New(Options{Buckets: m, Clock: clk.Now})
	defer s.Close()
	// Left: a 500, b 900, c 700. Turns of 150 go to b (750 left), b
	// (600), c (550).
	for _, want := range []string{"p/b", "p/b", "p/c"} {
		g, err := s.Acquire(ctx, Standard, keys, Cost{Input: 150})
		if err != nil {
			t.Fatal(err)
		}
		if g.Key.ID != want {
			t.Fatalf("turn on %s, want %s (most headroom)", g.Key.ID, want)
		}
	}
	// A turn of 600 fits b only.
	g, err := s.Acquire(ctx, Standard, keys, Cost{Input: 600})
	if err != nil {
		t.Fatal(err)
	}
	if g.Key.ID != "p/b" {
		t.Fatalf("turn of 600 on %s, want p/b", g.Key.ID)
	}
}

// TestSchedulerServesByDRR checks the dispatcher's order end to end: turns
// queued while the key is closed are admitted per class weights.
func TestSchedulerServesByDRR(t *testing.T) {
	gate := newGate(time.Millisecond)
	s := New(Options{Buckets: gate, Poll: time.Millisecond})
	defer s.Close()

	var wg sync.WaitGroup
	defer wg.Wait()
	// Output marks the class; input the turn's place in its class.
	// Interactive first, so that the dispatcher's turn sits there.
	for ci, class := range []string{Interactive, Standard, Batch} {
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g, err := s.Acquire(context.Background(), class, oneKey, Cost{Input: int64(990 + i), Output: int64(ci + 1)})
				if err != nil {
					t.Error(err)
					return
				}
				g.Done(context.Background(), g.est)
			}()
			waitQueued(t, s, class, i+1)
		}
	}
	gate.setOpen(100)
	wg.Wait()

	var got []byte
	next := map[int64]int64{}
	for _, c := range gate.takes() {
		got = append(got, "isb"[c.Output-1])
		if c.Input != 990+next[c.Output] {
			t.Errorf("class %d served turn %d before turn %d", c.Output, c.Input-990, next[c.Output])
		}
		next[c.Output]++
	}
	if want := "iiiissb" + "iissb" + "ssb" + "bbb"; string(got) != want {
		t.Fatalf("served %s, want %s", got, want)
	}
}

func TestAcquireCancelLeavesQueue(t *testing.T) {
	gate := newGate(time.Millisecond)
	obs := newRecorder()
	s := New(Options{Buckets: gate, Poll: time.Millisecond, Observer: obs})
	defer s.Close()

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, Batch, oneKey, Cost{Requests: 1, Input: 100})
		errc <- err
	}()
	waitQueued(t, s, Batch, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire after cancel: %v, want context.Canceled", err)
	}
	waitQueued(t, s, Batch, 0)
	if pools(s) != 0 {
		t.Fatal("a canceled turn left its pool behind")
	}
	obs.mu.Lock()
	n := obs.lengths[Batch]
	obs.mu.Unlock()
	if n != 0 {
		t.Fatalf("observer's batch queue length %d, want 0", n)
	}
	// The key opening later admits nobody: the canceled turn is gone.
	gate.setOpen(1)
	g, err := s.Acquire(context.Background(), Batch, oneKey, Cost{Requests: 1, Input: 7})
	if err != nil {
		t.Fatal(err)
	}
	if taken := gate.takes(); len(taken) != 1 || taken[0].Input != 7 {
		t.Fatalf("takes %v, want only the new turn's", taken)
	}
	g.Done(context.Background(), Cost{Requests: 1, Input: 7})
}

func TestAcquireMaxWait(t *testing.T) {
	clk := newFakeClock()
	gate := newGate(5 * time.Second)
	s := New(Options{Buckets: gate, Clock: clk.Now, MaxWait: 10 * time.Second, Poll: time.Millisecond})
	defer s.Close()

	keys := []Key{{ID: "p/k", Limits: minute(Limits{RPM: 60, InputTPM: 6000})}}
	errc := make(chan error, 1)
	go func() {
		_, err := s.Acquire(context.Background(), "no such class", keys, Cost{Requests: 1, Input: 1000})
		errc <- err
	}()
	waitQueued(t, s, Standard, 1)
	clk.Advance(9 * time.Second)
	select {
	case err := <-errc:
		t.Fatalf("Acquire returned %v before MaxWait", err)
	case <-time.After(20 * time.Millisecond):
	}
	clk.Advance(time.Second)
	var we *WaitError
	if err := <-errc; !errors.As(err, &we) {
		t.Fatalf("Acquire after MaxWait: %v, want a *WaitError", err)
	}
	// The one waiting turn needs 1000 of 6000 input tokens a minute:
	// the queue drains in 10s.
	if we.Class != Standard || we.Waited != 10*time.Second || we.RetryAfter != 10*time.Second {
		t.Fatalf("WaitError %+v, want standard, waited 10s, retry after 10s", *we)
	}
	if pools(s) != 0 {
		t.Fatal("an expired turn left its pool behind")
	}
}

func TestWaitErrorRetryAfterAtLeastOneSecond(t *testing.T) {
	clk := newFakeClock()
	gate := newGate(time.Millisecond)
	s := New(Options{Buckets: gate, Clock: clk.Now, MaxWait: time.Second, Poll: time.Millisecond})
	defer s.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := s.Acquire(context.Background(), Batch, []Key{{ID: "p/free"}}, Cost{Requests: 1})
		errc <- err
	}()
	waitQueued(t, s, Batch, 1)
	clk.Advance(time.Second)
	var we *WaitError
	if err := <-errc; !errors.As(err, &we) || we.RetryAfter != time.Second {
		t.Fatalf("Acquire after MaxWait: %v, want a *WaitError with RetryAfter 1s", err)
	}
}

func TestRejectOtherKey(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	keys := []Key{
		{ID: "p/a", Limits: minute(Limits{InputTPM: 600})},
		{ID: "p/b", Limits: minute(Limits{InputTPM: 600})},
	}
	s := New(Options{Buckets: m, Clock: clk.Now})
	defer s.Close()

	g, err := s.Acquire(ctx, Interactive, keys, Cost{Input: 300})
	if err != nil {
		t.Fatal(err)
	}
	if g.Key.ID != "p/a" {
		t.Fatalf("first turn on %s, want p/a", g.Key.ID)
	}
	g2, err := g.Reject(ctx, 0, keys)
	if err != nil {
		t.Fatal(err)
	}
	if g2 == nil || g2.Key.ID != "p/b" {
		t.Fatalf("Reject gave %+v, want a grant on p/b", g2)
	}
	if h := headroom(t, m, keys[0]); h != 0 {
		t.Fatalf("rejected key has headroom %v, want 0 (cooled)", h)
	}
	// Both cooled or short: no other key.
	g3, err := g2.Reject(ctx, 5*time.Second, keys)
	if err != nil || g3 != nil {
		t.Fatalf("Reject with every other key cooled: %+v, %v; want nil, nil", g3, err)
	}
	// a's cooling was DefaultCool; its take was given back: full again.
	clk.Advance(DefaultCool)
	if h := headroom(t, m, keys[0]); h != 1 {
		t.Fatalf("after its cooling, a has headroom %v, want 1 (take given back)", h)
	}
	if h := headroom(t, m, keys[1]); h != 0 {
		t.Fatalf("b cooled for 5s has headroom %v after 1s", h)
	}
	// A negative retryAfter (no connection) does not cool.
	g4, err := s.Acquire(ctx, Interactive, keys, Cost{Input: 300})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g4.Reject(ctx, -1, keys); err != nil {
		t.Fatal(err)
	}
	if h := headroom(t, m, g4.Key); h != 1 {
		t.Fatalf("a key rejected without cooling has headroom %v, want 1", h)
	}
}

func TestGrantDone(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	s := New(Options{Buckets: m, Clock: clk.Now})
	defer s.Close()
	k := Key{ID: "p/k", Limits: minute(Limits{RPM: 10, InputTPM: 1000, OutputTPM: 1000})}

	g, err := s.Acquire(ctx, Standard, []Key{k}, Cost{Requests: 1, Input: 200, Output: 500})
	if err != nil {
		t.Fatal(err)
	}
	// Measured: more input than estimated, far less output.
	g.Done(ctx, Cost{Requests: 1, Input: 300, Output: 100})
	g.Done(ctx, Cost{Input: 900, Output: 900}) // no-op
	if n := takeAll(t, m, k, Cost{Input: 1}, 1000); n != 700 {
		t.Fatalf("%d input tokens left, want 700", n)
	}
	if n := takeAll(t, m, k, Cost{Output: 1}, 1000); n != 900 {
		t.Fatalf("%d output tokens left, want 900", n)
	}
	if n := takeAll(t, m, k, Cost{Requests: 1}, 1000); n != 9 {
		t.Fatalf("%d requests left, want 9", n)
	}

	// A grant never used, given back whole.
	k2 := Key{ID: "p/k2", Limits: k.Limits}
	g2, err := s.Acquire(ctx, Standard, []Key{k2}, Cost{Requests: 1, Input: 100, Output: 100})
	if err != nil {
		t.Fatal(err)
	}
	g2.Done(ctx, Cost{})
	if n := takeAll(t, m, k2, Cost{Requests: 1}, 1000); n != 10 {
		t.Fatalf("after giving back a grant whole, %d requests fit, want 10", n)
	}
	var nilGrant *Grant
	nilGrant.Done(ctx, Cost{})
}

func TestGrantObserve(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	s := New(Options{Buckets: m, Clock: clk.Now})
	defer s.Close()
	k := Key{ID: "p/k", Limits: minute(Limits{RPM: 50, InputTPM: 10000})}
	g, err := s.Acquire(ctx, Standard, []Key{k}, Cost{Requests: 1, Input: 100})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("anthropic-ratelimit-requests-remaining", "4")
	h.Set("anthropic-ratelimit-input-tokens-remaining", "20000")
	g.Observe(ctx, h)
	if n := takeAll(t, m, k, Cost{Requests: 1}, 100); n != 4 {
		t.Fatalf("after the provider said 4 requests are left, %d fit", n)
	}
	if n := takeAll(t, m, k, Cost{Input: 100}, 100); n != 99 {
		t.Fatalf("a provider saying more input is left changed the view: %d turns of 100 fit, want 99", n)
	}
}

// TestGrantSettle checks that Settle leaves a key as Done and then
// Observe leave another, once for the correction, and that a settled or
// nil grant and a reply without headers are handled.
func TestGrantSettle(t *testing.T) {
	ctx := context.Background()
	lim := minute(Limits{RPM: 50, InputTPM: 1000, OutputTPM: 1000})
	est := Cost{Requests: 1, Input: 200, Output: 500}
	actual := Cost{Requests: 1, Input: 300, Output: 100}
	withHeaders := http.Header{}
	withHeaders.Set("anthropic-ratelimit-requests-remaining", "4")
	withHeaders.Set("anthropic-ratelimit-output-tokens-remaining", "850")
	tests := []struct {
		name        string
		h           http.Header
		settleAgain bool // Settle twice: the second only syncs
		requests    int
		input       int
		output      int
	}{
		// Output: 500 estimated, 100 measured: 900 left, then the
		// provider's 850.
		{"Headers", withHeaders, false, 4, 700, 850},
		{"NoHeaders", nil, false, 49, 700, 900},
		{"Twice", withHeaders, true, 4, 700, 850},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			m := NewMemory(clk.Now)
			s := New(Options{Buckets: m, Clock: clk.Now})
			defer s.Close()
			steps := Key{ID: "p/steps", Limits: lim}
			one := Key{ID: "p/one", Limits: lim}
			gs, err := s.Acquire(ctx, Standard, []Key{steps}, est)
			if err != nil {
				t.Fatal(err)
			}
			g, err := s.Acquire(ctx, Standard, []Key{one}, est)
			if err != nil {
				t.Fatal(err)
			}
			gs.Done(ctx, actual)
			gs.Observe(ctx, tc.h)
			g.Settle(ctx, actual, tc.h)
			if tc.settleAgain {
				g.Settle(ctx, Cost{Input: 900, Output: 900}, tc.h)
			}
			for _, c := range []struct {
				probe Cost
				want  int
			}{{Cost{Requests: 1}, tc.requests}, {Cost{Input: 1}, tc.input}, {Cost{Output: 1}, tc.output}} {
				got := takeAll(t, m, one, c.probe, 1000)
				if want := takeAll(t, m, steps, c.probe, 1000); got != want {
					t.Fatalf("after Settle, %d takes of %+v fit; after Done and Observe, %d", got, c.probe, want)
				}
				if got != c.want {
					t.Fatalf("after Settle, %d takes of %+v fit, want %d", got, c.probe, c.want)
				}
			}
		})
	}
	var nilGrant *Grant
	nilGrant.Settle(ctx, Cost{}, withHeaders)
}

func TestClose(t *testing.T) {
	gate := newGate(time.Millisecond)
	s := New(Options{Buckets: gate, Poll: time.Millisecond})
	errc := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := s.Acquire(context.Background(), Batch, oneKey, Cost{Requests: 1})
			errc <- err
		}()
	}
	waitQueued(t, s, Batch, 3)
	s.Close()
	for range 3 {
		if err := <-errc; !errors.Is(err, ErrClosed) {
			t.Fatalf("a turn waiting at Close got %v, want ErrClosed", err)
		}
	}
	if _, err := s.Acquire(context.Background(), Batch, oneKey, Cost{Requests: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close: %v, want ErrClosed", err)
	}
	s.Close() // twice is fine
}

func TestAcquireNoKeys(t *testing.T) {
	s := New(Options{Buckets: NewMemory(nil)})
	defer s.Close()
	if _, err := s.Acquire(context.Background(), Batch, nil, Cost{Requests: 1}); !errors.Is(err, ErrNoKeys) {
		t.Fatalf("Acquire without keys: %v, want ErrNoKeys", err)
	}
}

// TestPoolsIndependent checks that a pool without room does not hold up
// turns of another.
func TestPoolsIndependent(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	s := New(Options{Buckets: m, Clock: clk.Now, Poll: time.Millisecond})
	defer s.Close()
	full := Key{ID: "a/k", Limits: minute(Limits{RPM: 1})}
	mustTake(t, m, full, Cost{Requests: 1})
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Acquire(waitCtx, Batch, []Key{full}, Cost{Requests: 1})
	}()
	waitQueued(t, s, Batch, 1)
	g, err := s.Acquire(ctx, Batch, []Key{{ID: "b/k", Limits: minute(Limits{RPM: 60})}}, Cost{Requests: 1})
	if err != nil || g.Key.ID != "b/k" {
		t.Fatalf("a turn of another pool: %+v, %v", g, err)
	}
	cancel()
	<-done
}

// TestDispatcherSleeps checks that a turn waiting for capacity costs a
// Take per wait the buckets report (bounded by Poll), not a busy loop.
func TestDispatcherSleeps(t *testing.T) {
	gate := newGate(20 * time.Millisecond)
	s := New(Options{Buckets: gate, Poll: 40 * time.Millisecond})
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Acquire(ctx, Batch, oneKey, Cost{Requests: 1})
	}()
	waitQueued(t, s, Batch, 1)
	time.Sleep(300 * time.Millisecond)
	cancel()
	<-done
	gate.mu.Lock()
	calls := gate.calls
	gate.mu.Unlock()
	t.Logf("%d Takes", calls)
	// About 15 in 300ms at one per 20ms; a busy loop makes thousands.
	if calls > 100 {
		t.Fatalf("%d Takes in 300ms for one turn told to wait 20ms", calls)
	}
	if calls < 2 {
		t.Fatalf("%d Takes in 300ms: the dispatcher never looked again", calls)
	}
}

// TestMixedPool: a key without limits in a pool with a limited key is
// measured against the limited key's limits, not ranked above it forever.
// It shares the turns while both have room, takes what the limited key has
// no room for (no turn waits), and is passed over once a 429 cooled it or
// its provider's headers say it has little left.
func TestMixedPool(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	s := New(Options{Buckets: NewMemory(clk.Now), Clock: clk.Now})
	defer s.Close()
	// The unlimited key first: ranked at a headroom of 1 forever, it
	// would take every turn.
	keys := []Key{{ID: "p/free"}, {ID: "p/lim", Limits: Limits{RPM: 600}}} // burst 10
	acquire := func() *Grant {
		t.Helper()
		g, err := s.Acquire(ctx, Standard, keys, Cost{Requests: 1, Input: 100})
		if err != nil {
			t.Fatal(err)
		}
		if g.Waited != 0 {
			t.Fatalf("a turn waited %s with a key without limits in the pool", g.Waited)
		}
		return g
	}
	on := map[string]int{}
	for range 30 {
		g := acquire()
		on[g.Key.ID]++
		if g.Key.ID == "p/free" && (!g.Key.Advisory || g.Key.Limits.RPM != 600) {
			t.Fatalf("the unlimited key was granted as %+v, want advisory limits of 600 rpm", g.Key)
		}
	}
	// Both full: they alternate until both hold nothing (10 each), and
	// the unlimited key takes the 10 the limited one has no room for.
	if on["p/lim"] != 10 || on["p/free"] != 20 {
		t.Fatalf("30 turns at once went %v, want 10 on p/lim (its burst) and 20 on p/free", on)
	}

	// Two seconds later both are full again (the unlimited key had
	// taken 10 past its measure). A 429 on it cools it: the limited key
	// takes the turns while it has room.
	clk.Advance(2 * time.Second)
	g := acquire()
	if g.Key.ID != "p/free" {
		t.Fatalf("first turn after two seconds on %s, want p/free (first among equals)", g.Key.ID)
	}
	other, err := g.Reject(ctx, 5*time.Second, keys)
	if err != nil || other == nil || other.Key.ID != "p/lim" {
		t.Fatalf("Reject = %+v, %v; want the turn on p/lim", other, err)
	}
	for i := range 9 {
		if g := acquire(); g.Key.ID != "p/lim" {
			t.Fatalf("turn %d after a 429 on p/free went on %s, want p/lim", i, g.Key.ID)
		}
	}

	// Cooling over, buckets full: the provider's headers on the
	// unlimited key's reply say it has 1 request of 600 left, and a
	// second until its bucket is full: the limited key ranks first.
	clk.Advance(6 * time.Second)
	g = acquire()
	if g.Key.ID != "p/free" {
		t.Fatalf("first turn after the cooling on %s, want p/free", g.Key.ID)
	}
	g.Settle(ctx, Cost{Requests: 1, Input: 100}, http.Header{
		"X-Ratelimit-Remaining-Requests": {"1"},
		"X-Ratelimit-Reset-Requests":     {"1s"},
	})
	for i := range 5 {
		if g := acquire(); g.Key.ID != "p/lim" {
			t.Fatalf("turn %d after p/free reported 1 left went on %s, want p/lim", i, g.Key.ID)
		}
	}
}

// heldBatch is gateBuckets taking in batches, each batch held until the
// test releases it once the key is open: a turn can leave while the
// dispatcher takes for it.
type heldBatch struct {
	*gateBuckets
	entered chan []Cost
	release chan struct{}
}

var _ BatchTaker = heldBatch{}

func (h heldBatch) TakeBatch(ctx context.Context, k Key, cs []Cost) (int, time.Duration, float64, error) {
	h.mu.Lock()
	open := h.open > 0
	h.mu.Unlock()
	if open {
		h.entered <- cs
		<-h.release
	}
	n := 0
	for _, c := range cs {
		ok, wait, err := h.Take(ctx, k, c)
		if err != nil || !ok {
			return n, wait, 0.5, err
		}
		n++
	}
	return n, 0, 0.5, nil
}

// TestDispatcherTakesForQueueAtOnce: the dispatcher takes for the turns
// waiting in a pool in one call, in order, admits them, and gives back
// the take of one that left during the call.
func TestDispatcherTakesForQueueAtOnce(t *testing.T) {
	gate := heldBatch{gateBuckets: newGate(time.Millisecond), entered: make(chan []Cost, 1), release: make(chan struct{})}
	s := New(Options{Buckets: gate, Poll: time.Millisecond})
	defer s.Close()

	type answer struct {
		g   *Grant
		err error
	}
	answers := make([]chan answer, 3)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	for i := range answers {
		answers[i] = make(chan answer, 1)
		ctx := context.Background()
		if i == 1 {
			ctx = ctx2
		}
		go func() {
			g, err := s.Acquire(ctx, Standard, oneKey, Cost{Requests: 1, Input: int64(i + 1)})
			answers[i] <- answer{g, err}
		}()
		waitQueued(t, s, Standard, i+1)
	}
	gate.setOpen(3)
	s.nudge()
	cs := <-gate.entered
	if want := []Cost{{Requests: 1, Input: 1}, {Requests: 1, Input: 2}, {Requests: 1, Input: 3}}; !slices.Equal(cs, want) {
		t.Fatalf("the dispatcher took for %v, want the three turns in order %v", cs, want)
	}
	cancel2()
	if a := <-answers[1]; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("the turn that left got %v, %v; want context.Canceled", a.g, a.err)
	}
	close(gate.release)
	for _, i := range []int{0, 2} {
		a := <-answers[i]
		if a.err != nil {
			t.Fatalf("turn %d: %v", i+1, a.err)
		}
		if a.g.est.Input != int64(i+1) {
			t.Fatalf("turn %d got the grant of %+v", i+1, a.g.est)
		}
		a.g.Done(context.Background(), a.g.est)
	}
	gate.mu.Lock()
	defer gate.mu.Unlock()
	if len(gate.entered) != 0 || len(gate.taken) != 3 || !slices.Equal(gate.adjusts, []Cost{{Requests: -1, Input: -2}}) {
		t.Fatalf("takes %v, settles %v, another batch %t; want the three taken at once and the second's given back",
			gate.taken, gate.adjusts, len(gate.entered) != 0)
	}
}
