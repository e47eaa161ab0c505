package admit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/settle"
	"gatekeeper/store/memory"
	"gatekeeper/streaming"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

var now = time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)

func fixedNow() time.Time { return now }

func newRecords(t *testing.T, maxChildren int) *Records {
	t.Helper()
	st := memory.New(memory.Options{Clock: fixedNow})
	t.Cleanup(func() { _ = st.Close() })
	return &Records{Store: st, Ledger: memory.NewLedger(fixedNow), Now: fixedNow, Log: slog.New(slog.DiscardHandler), MaxChildren: maxChildren}
}

func refusalKind(err error) Kind {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Kind
	}
	return 0
}

func TestRootCreatesWithTenantDefaults(t *testing.T) {
	r := newRecords(t, 0)
	ctx := context.Background()
	tn := &config.Tenant{Name: "team-a", Budget: config.Budget{Turns: 7, Dollars: 2.5}}
	rec, err := r.Root(ctx, "run-1", true, tn)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Tenant != "team-a" || rec.Budget.Turns != 7 || rec.Budget.Dollars != 2.5 || rec.State != trajectory.Ready || !rec.CreatedAt.Equal(now) {
		t.Fatalf("root %+v, want team-a's READY record with turns 7, $2.5, created now", rec)
	}
	again, err := r.Root(ctx, "run-1", true, tn)
	if err != nil || again.ID != "run-1" {
		t.Fatalf("second Root: %v %v, want the same record", again, err)
	}
	if _, err := r.Root(ctx, "run-1", true, &config.Tenant{Name: "team-b"}); !errors.Is(err, ErrOtherTenant) {
		t.Fatalf("another tenant's Root: %v, want ErrOtherTenant", err)
	}
}

func TestRootOperatorsOnly(t *testing.T) {
	r := newRecords(t, 0)
	tn := &config.Tenant{Name: "team-a", Trajectories: config.TrajectoriesOperators}
	for _, named := range []bool{true, false} {
		_, err := r.Root(context.Background(), "run-x", named, tn)
		if refusalKind(err) != OperatorsOnly {
			t.Fatalf("named %v: %v, want an OperatorsOnly refusal", named, err)
		}
		if named != strings.Contains(err.Error(), "no operator created trajectory run-x") {
			t.Errorf("named %v: message %q", named, err)
		}
	}
	if _, err := r.Store.Get(context.Background(), "run-x"); !errors.Is(err, trajectory.ErrNotFound) {
		t.Fatalf("a refused run was created: %v", err)
	}
}

func TestRootMaxLive(t *testing.T) {
	r := newRecords(t, 0)
	ctx := context.Background()
	tn := &config.Tenant{Name: "team-a", Limits: config.TenantLimits{MaxLiveTrajectories: 1}}
	if _, err := r.Root(ctx, "run-1", true, tn); err != nil {
		t.Fatal(err)
	}
	_, err := r.Root(ctx, "run-2", true, tn)
	if refusalKind(err) != Exhausted || !strings.Contains(err.Error(), "max_live_trajectories") {
		t.Fatalf("second live run: %v, want an Exhausted refusal naming max_live_trajectories", err)
	}
	// The first run finishes: the ledger learns so when the next run asks.
	if _, err := r.Store.Update(ctx, "run-1", func(rec *trajectory.Record) ([]trajectory.Event, error) {
		var trs []trajectory.Transition
		for _, to := range []trajectory.State{trajectory.Finalizing, trajectory.Canceled} {
			tr, err := rec.Transition(to, "test", now)
			if err != nil {
				return nil, err
			}
			trs = append(trs, tr)
		}
		return trajectory.EventsFor(rec.ID, trs), nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Root(ctx, "run-2", true, tn); err != nil {
		t.Fatalf("a run after the first finished: %v", err)
	}
}

func TestScoped(t *testing.T) {
	r := newRecords(t, 0)
	ctx := context.Background()
	a, b := &config.Tenant{Name: "team-a"}, &config.Tenant{Name: "team-b"}
	if _, err := r.Root(ctx, "shared", true, a); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, id, tenant, want string }{
		{"no one's yet", "fresh", "team-a", "fresh"},
		{"the tenant's own", "shared", "team-a", "shared"},
		{"another tenant's", "shared", "team-b", trajectory.TenantScoped("shared", "team-b")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.Scoped(ctx, tc.id, tc.tenant)
			if err != nil || got != tc.want {
				t.Fatalf("Scoped(%s, %s) = %q, %v; want %q", tc.id, tc.tenant, got, err, tc.want)
			}
		})
	}
	// Once team-b's scoped run exists, it is found first.
	scoped := trajectory.TenantScoped("shared", "team-b")
	if _, err := r.Root(ctx, scoped, true, b); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Scoped(ctx, "shared", "team-b"); err != nil || got != scoped {
		t.Fatalf("Scoped after its creation = %q, %v; want %q", got, err, scoped)
	}
}

func TestChildMaxChildren(t *testing.T) {
	r := newRecords(t, 2)
	ctx := context.Background()
	if _, err := r.Root(ctx, "run", true, &config.Tenant{Name: "team-a", Budget: config.Budget{Turns: 5}}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		id := fmt.Sprintf("run/c%d", i)
		if err := r.Child(ctx, "run", "team-a", id, fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
		c, err := r.Store.Get(ctx, id)
		if err != nil || c.Tenant != "team-a" || c.Thread != fmt.Sprintf("k%d", i) || c.Budget != (trajectory.Budget{}) || c.ParentID != "run" {
			t.Fatalf("child %s: %+v %v, want team-a's, thread k%d, no budget of its own", id, c, err, i)
		}
	}
	if err := r.Child(ctx, "run", "team-a", "run/c0", "k0"); err != nil {
		t.Fatalf("an existing child: %v", err)
	}
	var full *trajectory.ChildrenFullError
	if err := r.Child(ctx, "run", "team-a", "run/c2", "k2"); !errors.As(err, &full) || full.Last != "run/c1" || full.Max != 2 {
		t.Fatalf("a third child: %v, want ChildrenFullError sharing run/c1", err)
	}
}

func TestCeilingsReserve(t *testing.T) {
	prices := meter.DefaultTable()
	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":8000,"messages":[]}`)
	w := Worst(prices, streaming.APIAnthropic, "claude-sonnet-4-5", body, 0)
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	// Room for the input and about 1,000 output tokens at the highest
	// output rate: a call asking 8,000 is clamped, not refused.
	room := w.Reservation(1000)
	tn := &config.Tenant{Name: "team-a", Limits: config.TenantLimits{DollarsPerDay: meter.ToDollars(room.Micros)}}

	c := &Ceilings{Ledger: memory.NewLedger(fixedNow), MinOutput: 256, Settles: settle.NewRetrier()}
	defer c.Settles.Close(ctx)
	h, err := c.Reserve(ctx, tn, Call{ID: "c1", Worst: w, MaxOut: 8000, AgentSet: true})
	if err != nil {
		t.Fatal(err)
	}
	if h.Call != "c1" || h.MaxOut <= 0 || h.MaxOut >= 8000 || h.Clamp["from"] != int64(8000) || h.Clamp["limit"] != "dollars_per_day" {
		t.Fatalf("hold %+v, want c1 clamped below 8000 by dollars_per_day", h)
	}
	if evs := h.ClampEvent("run", now); len(evs) != 1 || evs[0].Type != trajectory.EventBudgetClamp {
		t.Fatalf("clamp events %+v, want one budget_clamp", evs)
	}
	u, _ := c.Ledger.Usage(ctx, "team-a")
	if u.InFlight != 1 || u.Reserved.Micros == 0 {
		t.Fatalf("ledger after Reserve: %+v, want one call holding room", u)
	}
	// Another call finds the room held by c1: it waits for c1 to give
	// it back, then reserves.
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(30 * time.Millisecond)
		c.Release(ctx, log, tn.Name, &h)
	}()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	h2, err := c.Reserve(wctx, tn, Call{ID: "c2", Worst: w, MaxOut: 8000})
	cancel()
	<-released
	if err != nil || h2.Call != "c2" {
		t.Fatalf("a call while c1 holds the room: %+v %v, want c2 reserved once c1 gave the room back", h2, err)
	}
	h = h2
	c.Release(ctx, log, tn.Name, &h)
	c.Release(ctx, log, tn.Name, &h) // once only
	if u, _ := c.Ledger.Usage(ctx, "team-a"); u.InFlight != 0 || u.Reserved != (tenant.Amount{}) || u.Day().Micros != 0 {
		t.Fatalf("ledger after Release: %+v, want nothing held or spent", u)
	}
	// Spend all the room: nothing fits, the call is refused for good.
	h, err = c.Reserve(ctx, tn, Call{ID: "c3", Worst: w, MaxOut: 8000})
	if err != nil {
		t.Fatal(err)
	}
	c.Settle(ctx, log, tn, &h, Amount(room.Micros, trajectory.Usage{InputTokens: 10, OutputTokens: 5}))
	if !h.Passed {
		t.Fatal("a settled hold is not marked passed")
	}
	if _, err := c.Reserve(ctx, tn, Call{ID: "c4", Worst: w, MaxOut: 8000}); refusalKind(err) != Exhausted {
		t.Fatalf("a call past the ceiling: %v, want Exhausted", err)
	}
	// A tenant without spend ceilings reserves nothing.
	if h, err := c.Reserve(ctx, &config.Tenant{Name: "free"}, Call{ID: "c5", Worst: w}); err != nil || h.Call != "" {
		t.Fatalf("a tenant without ceilings: %+v %v, want no hold", h, err)
	}
}

// countingLedger counts the ledger calls admission makes.
type countingLedger struct {
	tenant.Ledger
	usage, reserve int
}

func (l *countingLedger) Usage(ctx context.Context, name string) (tenant.Usage, error) {
	l.usage++
	return l.Ledger.Usage(ctx, name)
}

func (l *countingLedger) Reserve(ctx context.Context, name, call string, r tenant.Amount, lim tenant.Limits, ttl time.Duration) (bool, error) {
	l.reserve++
	return l.Ledger.Reserve(ctx, name, call, r, lim, ttl)
}

// A call its tenant's ceilings have room for costs one ledger call (on
// Redis, one script); only a call that must be clamped or refused reads
// the usage too.
func TestCeilingsReserveOneCallWhenRoomy(t *testing.T) {
	ctx := context.Background()
	w := Worst(meter.DefaultTable(), streaming.APIAnthropic, "claude-sonnet-4-5",
		[]byte(`{"model":"claude-sonnet-4-5","max_tokens":8000,"messages":[]}`), 0)
	lg := &countingLedger{Ledger: memory.NewLedger(fixedNow)}
	c := &Ceilings{Ledger: lg, MinOutput: 256, Settles: settle.NewRetrier()}
	defer c.Settles.Close(ctx)
	roomy := &config.Tenant{Name: "roomy", Limits: config.TenantLimits{DollarsPerDay: 1000}}
	h, err := c.Reserve(ctx, roomy, Call{ID: "r1", Worst: w, MaxOut: 8000})
	if err != nil || h.Call != "r1" || h.MaxOut != 0 || h.Clamp != nil {
		t.Fatalf("a roomy call: %+v %v, want r1 reserved whole", h, err)
	}
	if lg.usage != 0 || lg.reserve != 1 {
		t.Fatalf("a roomy call made %d usage reads and %d reservations, want 0 and 1", lg.usage, lg.reserve)
	}
	u, _ := lg.Ledger.Usage(ctx, "roomy")
	if want := w.Reservation(8000); u.Reserved.Micros != want.Micros || u.Reserved.Tokens != want.Tokens {
		t.Fatalf("reserved %+v, want the whole worst case %+v", u.Reserved, want)
	}
	// Room for about 1,000 output tokens: the whole ask does not fit, so
	// the usage is read and the call clamped.
	tight := &config.Tenant{Name: "tight", Limits: config.TenantLimits{DollarsPerDay: meter.ToDollars(w.Reservation(1000).Micros)}}
	lg.usage, lg.reserve = 0, 0
	h, err = c.Reserve(ctx, tight, Call{ID: "t1", Worst: w, MaxOut: 8000})
	if err != nil || h.MaxOut <= 0 || h.MaxOut >= 8000 {
		t.Fatalf("a tight call: %+v %v, want it clamped", h, err)
	}
	if lg.usage != 1 || lg.reserve != 2 {
		t.Fatalf("a clamped call made %d usage reads and %d reservations, want 1 and 2", lg.usage, lg.reserve)
	}
}

func TestAmount(t *testing.T) {
	got := Amount(42, trajectory.Usage{InputTokens: 1, CachedInputTokens: 2, CacheWriteTokens: 3, OutputTokens: 4})
	if got.Micros != 42 || got.Tokens != 10 {
		t.Fatalf("Amount = %+v, want 42 micros, 10 tokens", got)
	}
}

func TestStaleAfter(t *testing.T) {
	tn := &config.Tenant{}
	if d := StaleAfter(tn); d != time.Hour {
		t.Errorf("without a call deadline: %s, want 1h", d)
	}
	tn.CallLimits.CallDeadline = config.Duration(90 * time.Second)
	if d := StaleAfter(tn); d != 150*time.Second {
		t.Errorf("with a 90s call deadline: %s, want 2m30s", d)
	}
}

// budgetChain is a thread record under its run, the run's budget dollars.
func budgetChain(dollars float64) []*trajectory.Record {
	root := &trajectory.Record{ID: "run", Tenant: "team-a", State: trajectory.Ready, Budget: trajectory.Budget{Dollars: dollars}}
	thread := &trajectory.Record{ID: "run/t", ParentID: "run", Tenant: "team-a", State: trajectory.Ready}
	return []*trajectory.Record{thread, root}
}

func TestBudgetReserve(t *testing.T) {
	prices := meter.DefaultTable()
	w := Worst(prices, streaming.APIAnthropic, "claude-sonnet-4-5", make([]byte, 4000), 0)
	b := &Budget{Stages: meter.DefaultThresholds(), MinOutput: 256, Owner: "r#1"}
	call := Call{ID: "c1", Worst: w, MaxOut: 4000}

	t.Run("reserves on every record", func(t *testing.T) {
		chain := budgetChain(100)
		adm, _, err := b.Reserve(chain, call, 1000, now)
		if err != nil {
			t.Fatal(err)
		}
		if adm.Call != "c1" || adm.Reserved.Calls != 1 || adm.Reserved.Micros <= 0 || adm.MaxOut != 0 || adm.Decision.Stage != meter.Nominal {
			t.Fatalf("admission %+v, want c1 reserved, nominal, unclamped", adm)
		}
		for _, rec := range chain {
			if rec.Reserved != adm.Reserved || !rec.StartedAt.Equal(now) {
				t.Errorf("%s reserved %+v started %s, want %+v now", rec.ID, rec.Reserved, rec.StartedAt, adm.Reserved)
			}
		}
		th := chain[0]
		if th.Call != "c1" || th.CallOwner != "r#1" || th.CallInput != 1000 || !th.CallBeat.Equal(now) {
			t.Errorf("thread record call %q owner %q input %d beat %s", th.Call, th.CallOwner, th.CallInput, th.CallBeat)
		}
		if got, ok := Own(chain, "c1", []Admission{adm}, now); ok {
			t.Fatalf("Own on a READY record: %+v, want none", got)
		}
		th.State = trajectory.CallingModel
		if got, ok := Own(chain, "c1", []Admission{{Call: "c1"}, adm}, now); !ok || got.Reserved != adm.Reserved {
			t.Fatalf("Own = %+v %v, want the attempt that reserved %+v", got, ok, adm.Reserved)
		}
		if _, ok := Own(chain, "other", []Admission{adm}, now); ok {
			t.Fatal("Own found another call's admission")
		}
		if _, err := Abandon(chain, "other", now); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("Abandon of a call not held: %v, want ErrNotHeld", err)
		}
		if _, err := Abandon(chain, "c1", now); err != nil {
			t.Fatal(err)
		}
		for _, rec := range chain {
			if rec.Reserved != (trajectory.Reservation{}) {
				t.Errorf("%s still reserves %+v after Abandon", rec.ID, rec.Reserved)
			}
		}
	})
	t.Run("clamps to what is left", func(t *testing.T) {
		chain := budgetChain(meter.ToDollars(w.Reservation(1000).Micros))
		adm, evs, err := b.Reserve(chain, call, 1000, now)
		if err != nil {
			t.Fatal(err)
		}
		if adm.MaxOut <= 0 || adm.MaxOut >= 4000 {
			t.Fatalf("admission %+v, want clamped below 4000", adm)
		}
		var clamp bool
		for _, e := range evs {
			clamp = clamp || e.Type == trajectory.EventBudgetClamp
		}
		if !clamp {
			t.Errorf("events %+v, want a budget_clamp", evs)
		}
	})
	t.Run("waits for calls in flight", func(t *testing.T) {
		chain := budgetChain(meter.ToDollars(w.Reservation(300).Micros))
		for _, rec := range chain {
			rec.Reserved = trajectory.Reservation{Calls: 1, Micros: w.Reservation(300).Micros}
		}
		if _, _, err := b.Reserve(chain, call, 1000, now); !errors.Is(err, ErrWait) {
			t.Fatalf("Reserve while another call holds the budget: %v, want ErrWait", err)
		}
	})
	t.Run("halts an exhausted run", func(t *testing.T) {
		chain := budgetChain(0.01)
		chain[1].Spend.Dollars = 0.01
		adm, _, err := b.Reserve(chain, call, 1000, now)
		if err != nil {
			t.Fatal(err)
		}
		if adm.Decision.Stage != meter.Halt || chain[1].State != trajectory.Failed || adm.Reserved != (trajectory.Reservation{}) {
			t.Fatalf("admission %+v, run %s; want halt, FAILED, nothing reserved", adm, chain[1].State)
		}
		err = Halted(chain[0], adm)
		if refusalKind(err) != Exhausted || !strings.Contains(err.Error(), "the run run's dollars budget") {
			t.Fatalf("Halted = %v, want an Exhausted refusal naming the run's dollars budget", err)
		}
	})
}

func TestHints(t *testing.T) {
	h := NewHints(2)
	h.Put("a", Hint{Parent: "run", Base: "run/a"})
	h.Put("b", Hint{Parent: "run", Base: "run/b", Shared: true})
	if v, ok := h.Get("b"); !ok || !v.Shared || v.Base != "run/b" {
		t.Fatalf("Get(b) = %+v %v", v, ok)
	}
	h.Drop("b")
	if _, ok := h.Get("b"); ok {
		t.Fatal("a dropped hint is still found")
	}
	h.Put("b", Hint{})
	h.Put("c", Hint{Base: "run/c"}) // past max: the others are forgotten
	if _, ok := h.Get("a"); ok {
		t.Fatal("the hints grew past their bound")
	}
	if v, ok := h.Get("c"); !ok || v.Base != "run/c" {
		t.Fatalf("Get(c) = %+v %v", v, ok)
	}
}

func TestNewCallID(t *testing.T) {
	a, b := NewCallID(), NewCallID()
	if len(a) != 16 || a == b {
		t.Fatalf("call ids %q %q, want two different 16-hex ids", a, b)
	}
}
