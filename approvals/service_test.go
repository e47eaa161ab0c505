package approvals_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/internal/redistest"
	"gatekeeper/store/memory"
	redisstore "gatekeeper/store/redis"
	"gatekeeper/trajectory"
)

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// clock is a settable clock for tests of expiry.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// recorder is a Notifier that reports what it was told on a channel.
type recorder struct {
	notes chan string
	block bool // wait for ctx before answering
}

func (r *recorder) Announce(ctx context.Context, req *approvals.Request) error {
	return r.note(ctx, "announce "+req.ID)
}

func (r *recorder) Decided(ctx context.Context, req *approvals.Request) error {
	return r.note(ctx, "decided "+req.ID+" "+string(req.State))
}

func (r *recorder) note(ctx context.Context, s string) error {
	if r.block {
		<-ctx.Done()
		r.notes <- "stopped"
		return ctx.Err()
	}
	r.notes <- s
	return nil
}

func (r *recorder) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-r.notes:
		if got != want {
			t.Fatalf("notified %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no notification, want %q", want)
	}
}

type fixture struct {
	svc     *approvals.Service
	store   approvals.Store
	clock   *clock
	notes   *recorder
	signals <-chan trajectory.Signal
	decided chan *approvals.Request
}

func newFixture(t *testing.T, store approvals.Store, maxPending int) *fixture {
	t.Helper()
	f := &fixture{store: store, clock: &clock{now: t0}, notes: &recorder{notes: make(chan string, 64)}, decided: make(chan *approvals.Request, 64)}
	sigs := memory.New(memory.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := sigs.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.signals = ch
	gates, err := approvals.Compile([]config.Gate{{Name: "destructive-shell", When: `tool.name == "Bash"`,
		Approvers: config.Approvers{Roles: []string{"secops", "sre"}, Quorum: 2, DistinctRoles: true}}})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = approvals.NewService(approvals.ServiceOptions{
		Store: store, Gates: gates, Notifiers: []approvals.Notifier{f.notes}, Signals: sigs,
		Clock: f.clock.Now, MaxPending: maxPending,
		Decided: func(r *approvals.Request) { f.decided <- r },
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := f.svc.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f
}

// open holds a turn of trajectory with one request per command.
func (f *fixture) open(t *testing.T, trajectory, key string, commands ...string) (*approvals.Hold, []*approvals.Request, error) {
	t.Helper()
	gate, _ := f.svc.Gates().Lookup("destructive-shell")
	h := &approvals.Hold{Trajectory: trajectory, Root: trajectory, Tenant: "team-a", Key: key, API: "anthropic"}
	var reqs []*approvals.Request
	for _, c := range commands {
		call, err := approvals.Canonical("Bash", []byte(`{"command":"`+c+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, gate.Request("", call, gate.When, f.clock.Now()))
	}
	got, err := f.svc.Open(context.Background(), h, reqs)
	return got, reqs, err
}

func (f *fixture) expectSignal(t *testing.T, id string) {
	t.Helper()
	select {
	case s := <-f.signals:
		if s.ID != id || s.Kind != approvals.SignalKind {
			t.Fatalf("signal %+v, want {%s approval}", s, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no signal")
	}
}

func vote(who string, approve bool, roles ...string) approvals.Vote {
	return approvals.Vote{Approver: who, Roles: roles, Approve: approve, Via: approvals.ViaAdmin}
}

func TestServiceOpenAndVote(t *testing.T) {
	f := newFixture(t, memory.NewApprovals(memory.ApprovalsOptions{}), 0)
	ctx := context.Background()
	h, reqs, err := f.open(t, "run-1", "turn-1", "rm -rf /srv")
	if err != nil {
		t.Fatal(err)
	}
	r := reqs[0]
	if h.ID == "" || r.ID == "" || r.Hold != h.ID || r.Trajectory != "run-1" || len(h.Requests) != 1 || h.Requests[0] != r.ID ||
		h.State != approvals.Holding || !h.ExpiresAt.Equal(r.ExpiresAt) {
		t.Fatalf("Open did not link the hold and its request: %+v %+v", h, r)
	}
	f.notes.expect(t, "announce "+r.ID)

	// The same turn again finds the hold.
	again, _, err := f.open(t, "run-1", "turn-1", "rm -rf /srv")
	if !errors.Is(err, approvals.ErrExists) || again.ID != h.ID {
		t.Fatalf("Open of a held turn = %v, %v; want the hold and ErrExists", again, err)
	}

	if _, err := f.svc.Vote(ctx, r.ID, vote("mallory", true, "operator")); !errors.Is(err, approvals.ErrNotApprover) {
		t.Fatalf("a vote without the role: %v", err)
	}
	got, err := f.svc.Vote(ctx, r.ID, vote("carol", true, "approver:secops"))
	if err != nil || got.State != approvals.Pending {
		t.Fatalf("first vote: %v, %v", got, err)
	}
	if _, err := f.svc.Vote(ctx, r.ID, vote("carol", true, "approver:secops")); !errors.Is(err, approvals.ErrAlreadyVoted) {
		t.Fatalf("second vote of one person: %v", err)
	}
	got, err = f.svc.Vote(ctx, r.ID, vote("erin", true, "sre"))
	if err != nil || got.State != approvals.Approved {
		t.Fatalf("second approver: %+v, %v", got, err)
	}
	f.expectSignal(t, "run-1")
	f.notes.expect(t, "decided "+r.ID+" approved")
	if d := <-f.decided; d.ID != r.ID || d.State != approvals.Approved {
		t.Errorf("Decided hook got %+v", d)
	}
	if _, err := f.svc.Vote(ctx, r.ID, vote("dave", false, "sre")); !errors.Is(err, approvals.ErrDecided) {
		t.Fatalf("vote after the decision: %v", err)
	}
}

// A hold that follows the turn's latest hold (its Previous) is opened as
// the turn's next; one that does not is the turn held already.
func TestServiceOpenNextHold(t *testing.T) {
	f := newFixture(t, memory.NewApprovals(memory.ApprovalsOptions{}), 0)
	ctx := context.Background()
	first, reqs, err := f.open(t, "run-1", "turn-1", "rm -rf /srv")
	if err != nil {
		t.Fatal(err)
	}
	f.notes.expect(t, "announce "+reqs[0].ID)
	gate, _ := f.svc.Gates().Lookup("destructive-shell")
	call, err := approvals.Canonical("Bash", []byte(`{"command":"rm -rf /var"}`))
	if err != nil {
		t.Fatal(err)
	}
	next := &approvals.Hold{Trajectory: "run-1", Root: "run-1", Tenant: "team-a", Key: "turn-1", API: "anthropic",
		Generation: 2, Previous: first.ID}
	got, err := f.svc.Open(ctx, next, []*approvals.Request{gate.Request("", call, gate.When, f.clock.Now())})
	if err != nil || got.ID == first.ID || got.Previous != first.ID {
		t.Fatalf("Open of the next hold = %+v, %v; want a new hold after %s", got, err, first.ID)
	}
	latest, err := f.svc.Store().FindHold(ctx, "run-1", "turn-1")
	if err != nil || latest.ID != got.ID || latest.Generation != 2 {
		t.Fatalf("the turn's latest hold = %+v, %v; want %s", latest, err, got.ID)
	}
	stale := &approvals.Hold{Trajectory: "run-1", Root: "run-1", Tenant: "team-a", Key: "turn-1", API: "anthropic",
		Generation: 2, Previous: first.ID}
	if again, err := f.svc.Open(ctx, stale, nil); !errors.Is(err, approvals.ErrExists) || again.ID != got.ID {
		t.Fatalf("Open after a hold that is no longer the latest = %+v, %v; want the latest and ErrExists", again, err)
	}
}

func TestServiceDenyAndDecide(t *testing.T) {
	f := newFixture(t, memory.NewApprovals(memory.ApprovalsOptions{}), 0)
	ctx := context.Background()
	_, reqs, err := f.open(t, "run-1", "turn-1", "rm -rf /a", "rm -rf /b")
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.svc.Vote(ctx, reqs[0].ID, vote("carol", false, "secops"))
	if err != nil || got.State != approvals.Denied {
		t.Fatalf("deny: %+v, %v", got, err)
	}
	f.expectSignal(t, "run-1")
	got, err = f.svc.Decide(ctx, reqs[1].ID, approvals.Stale, "budget halted")
	if err != nil || got.State != approvals.Stale || got.Reason != "budget halted" {
		t.Fatalf("Decide: %+v, %v", got, err)
	}
	f.expectSignal(t, "run-1")
	if _, err := f.svc.Decide(ctx, reqs[1].ID, approvals.Withdrawn, "again"); !errors.Is(err, approvals.ErrDecided) {
		t.Fatalf("Decide twice: %v", err)
	}
}

func TestServiceExpiry(t *testing.T) {
	f := newFixture(t, memory.NewApprovals(memory.ApprovalsOptions{}), 0)
	ctx := context.Background()
	_, reqs, err := f.open(t, "run-1", "turn-1", "rm -rf /a", "rm -rf /b")
	if err != nil {
		t.Fatal(err)
	}
	if n := f.svc.Sweep(ctx); n != 0 {
		t.Fatalf("Sweep before the expiry expired %d", n)
	}
	f.clock.Add(15 * time.Minute)
	// A vote at the expiry is not counted and expires the request.
	got, err := f.svc.Vote(ctx, reqs[0].ID, vote("carol", true, "secops"))
	if !errors.Is(err, approvals.ErrExpired) || got.State != approvals.Expired || len(got.Votes) != 0 {
		t.Fatalf("vote after expiry: %+v, %v", got, err)
	}
	f.expectSignal(t, "run-1")
	if n := f.svc.Sweep(ctx); n != 1 {
		t.Fatalf("Sweep expired %d, want 1", n)
	}
	f.expectSignal(t, "run-1")
	r, _ := f.store.Get(ctx, reqs[1].ID)
	if r.State != approvals.Expired || r.RefusalReason() != approvals.ReasonExpired {
		t.Errorf("after Sweep: %s", r.State)
	}
	if n := f.svc.Sweep(ctx); n != 0 {
		t.Errorf("a second Sweep expired %d", n)
	}
}

func TestServiceRunExpires(t *testing.T) {
	f := newFixture(t, memory.NewApprovals(memory.ApprovalsOptions{}), 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.svc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	_, reqs, err := f.open(t, "run-1", "turn-1", "rm -rf /a")
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Add(time.Hour)
	f.svc.Wake()
	f.expectSignal(t, "run-1")
	if r, _ := f.store.Get(context.Background(), reqs[0].ID); r.State != approvals.Expired {
		t.Errorf("Run left the request %s", r.State)
	}
}

func TestServiceMaxPending(t *testing.T) {
	f := newFixture(t, memory.NewApprovals(memory.ApprovalsOptions{}), 2)
	if _, _, err := f.open(t, "run-1", "turn-1", "rm -rf /a", "rm -rf /b"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.open(t, "run-1", "turn-2", "rm -rf /c"); !errors.Is(err, approvals.ErrTooManyPending) {
		t.Fatalf("a third pending request: %v, want ErrTooManyPending", err)
	}
	if _, _, err := f.open(t, "run-2", "turn-1", "rm -rf /c"); err != nil {
		t.Fatalf("another root is bounded on its own: %v", err)
	}
}

// TestServiceCloseStopsNotifications checks that a channel that never
// answers holds neither a vote nor Close.
func TestServiceCloseStopsNotifications(t *testing.T) {
	store := memory.NewApprovals(memory.ApprovalsOptions{})
	notes := &recorder{notes: make(chan string, 8), block: true}
	svc := approvals.NewService(approvals.ServiceOptions{Store: store, Notifiers: []approvals.Notifier{notes}, Clock: func() time.Time { return t0 }})
	h := &approvals.Hold{Trajectory: "run-1", Root: "run-1", Key: "k"}
	call, _ := approvals.Canonical("Bash", []byte(`{}`))
	r := &approvals.Request{Call: call, Digest: call.Digest(), Roles: []string{"sre"}, Quorum: 1, ExpiresAt: t0.Add(time.Minute)}
	if _, err := svc.Open(context.Background(), h, []*approvals.Request{r}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Vote(context.Background(), r.ID, vote("erin", true, "sre")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := svc.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range 2 {
		if got := <-notes.notes; got != "stopped" {
			t.Errorf("notification %q", got)
		}
	}
}

func TestServiceRedis(t *testing.T) {
	url := redistest.Start(t)
	o, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	client := goredis.NewClient(o)
	t.Cleanup(func() { _ = client.Close() })
	f := newFixture(t, redisstore.NewApprovals(redisstore.ApprovalsOptions{Client: client}), 0)
	ctx := context.Background()
	_, reqs, err := f.open(t, "run-1", "turn-1", "rm -rf /srv")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Vote(ctx, reqs[0].ID, vote("carol", true, "secops")); err != nil {
		t.Fatal(err)
	}
	got, err := f.svc.Vote(ctx, reqs[0].ID, vote("erin", true, "sre"))
	if err != nil || got.State != approvals.Approved {
		t.Fatalf("%+v, %v", got, err)
	}
	f.expectSignal(t, "run-1")
	// A second store, as another replica or a restarted process, reads the
	// decision.
	other := redisstore.NewApprovals(redisstore.ApprovalsOptions{Client: client})
	if r, err := other.Get(ctx, reqs[0].ID); err != nil || r.State != approvals.Approved || len(r.Votes) != 2 {
		t.Errorf("read back: %+v, %v", r, err)
	}
}

// OldestPending is the wait of the oldest request still pending, across
// every replica sharing the store (a second Service on the same store sees
// the same); decided requests do not count; 0 when none is pending.
func TestServiceOldestPending(t *testing.T) {
	stores := map[string]func(t *testing.T) approvals.Store{
		"memory": func(*testing.T) approvals.Store { return memory.NewApprovals(memory.ApprovalsOptions{}) },
		"redis": func(t *testing.T) approvals.Store {
			client, err := redisstore.NewClient(redistest.Start(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = client.Close() })
			return redisstore.NewApprovals(redisstore.ApprovalsOptions{Client: client})
		},
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, newStore(t), 0)
			ctx := context.Background()
			oldest := func(want time.Duration) {
				t.Helper()
				other := approvals.NewService(approvals.ServiceOptions{Store: f.store, Gates: f.svc.Gates(), Clock: f.clock.Now})
				for _, svc := range []*approvals.Service{f.svc, other} {
					if got, err := svc.OldestPending(ctx); err != nil || got != want {
						t.Fatalf("OldestPending = %v, %v; want %v", got, err, want)
					}
				}
			}
			oldest(0)
			_, first, err := f.open(t, "run-1", "turn-1", "rm -rf /a")
			if err != nil {
				t.Fatal(err)
			}
			f.clock.Add(3 * time.Minute)
			if _, _, err := f.open(t, "run-2", "turn-1", "rm -rf /b"); err != nil {
				t.Fatal(err)
			}
			f.clock.Add(time.Minute)
			oldest(4 * time.Minute)
			if _, err := f.svc.Vote(ctx, first[0].ID, vote("carol", false, "secops")); err != nil {
				t.Fatal(err)
			}
			oldest(time.Minute)
		})
	}
}
