package admit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/chainrule"
	"gatekeeper/proxy/internal/sweep"
	"gatekeeper/proxy/internal/threadid"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// silence is a Sweep that takes every call in flight for lost, or none;
// it reclaims as the sweeper does.
type silence bool

func (s silence) Silent(*trajectory.Record, time.Time) bool { return bool(s) }

func (s silence) Reclaim(chain []*trajectory.Record, now time.Time) ([]trajectory.Event, sweep.Lost, error) {
	return sweep.New(sweep.Options{Config: &config.Config{}, Prices: meter.DefaultTable(), Stages: meter.DefaultThresholds(), Replica: "r"}).Reclaim(chain, now)
}

var _ Sweep = silence(false)

func chainTurn() *Turn {
	w := Worst(meter.DefaultTable(), streaming.APIAnthropic, "claude-sonnet-4-5", make([]byte, 4000), 0)
	return &Turn{Tenant: "team-a", Thread: "k", Call: Call{ID: "c1", Worst: w, MaxOut: 4000}, Input: 1000,
		Provider: "anthropic", Model: "claude-sonnet-4-5", Ceil: &Hold{}, MaxChildren: 4,
		Watchdog: (&config.Config{}).WatchdogFor(nil), Sweep: silence(false)}
}

// calling checks that the thread record was admitted: it is calling the
// model.
func calling(t *testing.T, chain []*trajectory.Record, _ *Turn, _ Admission) {
	if chain[0].State != trajectory.CallingModel {
		t.Errorf("thread record %s, want CALLING_MODEL", chain[0].State)
	}
}

func TestBudgetChain(t *testing.T) {
	b := &Budget{Stages: meter.DefaultThresholds(), MinOutput: 256, Owner: "r#1"}
	tests := []struct {
		name    string
		prepare func(chain []*trajectory.Record, t *Turn)
		wantErr error
		kind    Kind // the refusal wanted
		check   func(t *testing.T, chain []*trajectory.Record, at *Turn, adm Admission)
	}{
		{name: "admits a ready thread", check: func(t *testing.T, chain []*trajectory.Record, at *Turn, adm Admission) {
			th := chain[0]
			if th.State != trajectory.CallingModel || th.Thread != "k" || th.Call != "c1" || th.Provider != "anthropic" || th.Model != "claude-sonnet-4-5" {
				t.Errorf("thread record %s thread %q call %q provider %q model %q", th.State, th.Thread, th.Call, th.Provider, th.Model)
			}
			if len(at.Tried) != 1 || at.Tried[0].Reserved != adm.Reserved || at.BusyElsewhere {
				t.Errorf("turn after admission: tried %+v busy elsewhere %v", at.Tried, at.BusyElsewhere)
			}
		}},
		{name: "another tenant's record is not there", prepare: func(c []*trajectory.Record, _ *Turn) { c[1].Tenant = "team-b" },
			wantErr: trajectory.ErrNotFound},
		{name: "a finished run refuses", prepare: func(c []*trajectory.Record, _ *Turn) { c[1].State = trajectory.Canceled },
			kind: RunEnded},
		{name: "an agent's run of a tenant switched to operators refuses", prepare: func(c []*trajectory.Record, at *Turn) {
			c[1].CreatedBy, at.OperatorsOnly = trajectory.Creator{Kind: trajectory.CreatorAgent, Name: "team-a"}, true
		}, kind: OperatorsOnly},
		{name: "an operator's run of a tenant switched to operators admits", prepare: func(c []*trajectory.Record, at *Turn) {
			c[1].CreatedBy, at.OperatorsOnly = trajectory.Creator{Kind: trajectory.CreatorOperator, Name: "alice"}, true
			c[0].CreatedBy = trajectory.Creator{Kind: trajectory.CreatorAgent, Name: "team-a"} // its thread, an agent's
		}, check: calling},
		{name: "a run saved before records kept their creator admits", prepare: func(c []*trajectory.Record, at *Turn) {
			at.OperatorsOnly = true
		}, check: calling},
		{name: "a paused run makes its threads wait", prepare: func(c []*trajectory.Record, _ *Turn) { c[1].State = trajectory.Paused },
			wantErr: ErrPaused},
		{name: "another conversation's record", prepare: func(c []*trajectory.Record, _ *Turn) { c[0].Thread = "other" },
			wantErr: ErrOtherThread},
		{name: "a shared record serves another conversation", prepare: func(c []*trajectory.Record, at *Turn) {
			c[0].Thread, at.Shared, at.SharedNew = "other", true, true
		}, check: func(t *testing.T, _ []*trajectory.Record, at *Turn, _ Admission) {
			if at.SharedNew {
				t.Error("the children_full event is still due after it was written")
			}
		}},
		{name: "busy with this replica's call", prepare: func(c []*trajectory.Record, _ *Turn) {
			c[0].State, c[0].Call, c[0].CallOwner = trajectory.CallingModel, "c0", "r#1"
		}, wantErr: ErrBusy},
		{name: "busy with another replica's call", prepare: func(c []*trajectory.Record, _ *Turn) {
			c[0].State, c[0].Call, c[0].CallOwner = trajectory.CallingModel, "c0", "r#2"
		}, wantErr: ErrBusy, check: func(t *testing.T, _ []*trajectory.Record, at *Turn, _ Admission) {
			if !at.BusyElsewhere {
				t.Error("busy elsewhere not reported")
			}
		}},
		{name: "a gated call in flight may be opening a hold", prepare: func(c []*trajectory.Record, at *Turn) {
			c[0].State, c[0].Call, at.Gated = trajectory.CallingModel, "c0", true
		}, wantErr: ErrHoldOpening},
		{name: "a held reply", prepare: func(c []*trajectory.Record, at *Turn) {
			c[0].State, at.Gated = trajectory.AwaitingApproval, true
		}, wantErr: ErrAwaiting},
		{name: "a held reply, the hold already looked for", prepare: func(c []*trajectory.Record, at *Turn) {
			c[0].State, at.Gated, at.HoldChecked = trajectory.AwaitingApproval, true, true
		}, wantErr: ErrBusy},
		{name: "a silent call is reclaimed", prepare: func(c []*trajectory.Record, at *Turn) {
			c[0].State, c[0].Call, c[0].CallReserved = trajectory.CallingModel, "c0", trajectory.Reservation{Calls: 1}
			c[0].CallInput, c[0].CallOutput, c[0].Model = 1000, 250, "claude-sonnet-4-5"
			for _, r := range c {
				r.Reserved = trajectory.Reservation{Calls: 1}
			}
			at.Sweep = silence(true)
		}, check: func(t *testing.T, c []*trajectory.Record, at *Turn, _ Admission) {
			if len(c[0].SweptCalls) != 1 || c[0].SweptCalls[0].Call != "c0" || c[0].Call != "c1" || c[0].Reserved.Calls != 1 {
				t.Errorf("swept %+v, record call %q reserved %+v; want c0 swept, c1 alone reserved", c[0].SweptCalls, c[0].Call, c[0].Reserved)
			}
			// Charged as the sweep charges: its input estimate and the
			// output of its last beat, on every record of the chain.
			for _, r := range c {
				if r.Spend.InputTokens != 1000 || r.Spend.OutputTokens != 250 || r.Spend.Turns != 1 || !r.Spend.Estimated || r.Spend.Dollars <= 0 {
					t.Errorf("%s spend %+v after the reclaim; want 1000 in, 250 out, one estimated turn", r.ID, r.Spend)
				}
			}
			if at.Reclaimed.Call != "c0" || at.Reclaimed.Usage.OutputTokens != 250 {
				t.Errorf("reclaimed %+v; want c0 with its 250 output tokens, for the tenant's ledger", at.Reclaimed)
			}
		}},
		{name: "an operator's message applies", prepare: func(c []*trajectory.Record, _ *Turn) {
			c[0].Pending.Control = &trajectory.Control{Kind: trajectory.ControlInterrupt, Message: "stop looping"}
		}, check: func(t *testing.T, c []*trajectory.Record, at *Turn, _ Admission) {
			if at.Interrupt != "stop looping" || c[0].Pending.Control != nil {
				t.Errorf("interrupt %q, control %+v", at.Interrupt, c[0].Pending.Control)
			}
		}},
		{name: "a pending pause applies", prepare: func(c []*trajectory.Record, _ *Turn) {
			c[0].Pending.Control = &trajectory.Control{Kind: trajectory.ControlPause}
		}, check: func(t *testing.T, c []*trajectory.Record, at *Turn, adm Admission) {
			if !adm.Paused || c[0].State != trajectory.Paused || len(at.Tried) != 0 {
				t.Errorf("admission %+v on a %s record, tried %d; want paused, nothing reserved", adm, c[0].State, len(at.Tried))
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			chain, at := budgetChain(100), chainTurn()
			if tc.prepare != nil {
				tc.prepare(chain, at)
			}
			adm, _, err := b.Chain(chain, at, now)
			switch {
			case tc.kind != 0:
				if refusalKind(err) != tc.kind {
					t.Fatalf("Chain = %v, want a refusal of kind %d", err, tc.kind)
				}
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Chain = %v, want %v", err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("Chain = %v", err)
			}
			if tc.check != nil {
				tc.check(t, chain, at, adm)
			}
		})
	}
}

func TestEnded(t *testing.T) {
	tests := []struct {
		name string
		rec  trajectory.Record
		kind Kind
		says string
	}{
		{name: "by its budget", rec: trajectory.Record{ID: "run", Tenant: "team-a", State: trajectory.Failed,
			ExitReason: chainrule.ExitBudgetExceeded, BindingDimension: "dollars"}, kind: Exhausted, says: "stopped by its dollars budget"},
		{name: "by an operator", rec: trajectory.Record{ID: "run", Tenant: "team-a", State: trajectory.Canceled,
			ExitReason: "OPERATOR"}, kind: RunEnded, says: "has ended"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Ended(&tc.rec)
			if refusalKind(err) != tc.kind || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Ended = %v, want kind %d saying %q", err, tc.kind, tc.says)
			}
		})
	}
}

// resumes wakes every wait at once, or never.
type resumes bool

func (r resumes) Wait(string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	if r {
		close(ch)
	}
	return ch, func() {}
}

func TestWaiter(t *testing.T) {
	ctx := context.Background()
	st := newRecords(t, 0).Store
	other := errors.New("store failed")
	tests := []struct {
		name      string
		w         Waiter
		err       error
		paused    bool
		elsewhere bool
		again     bool
		kind      Kind
		wantErr   error
	}{
		{name: "admitted", again: false},
		{name: "a store failure ends it", err: other, wantErr: other},
		{name: "busy here forks", err: ErrBusy, elsewhere: false, w: Waiter{BusyStep: time.Millisecond}, wantErr: ErrBusy},
		{name: "busy elsewhere looks again", err: ErrBusy, elsewhere: true, w: Waiter{BusyStep: time.Millisecond}, again: true},
		{name: "busy elsewhere, settles at once: forks", err: ErrBusy, elsewhere: true, wantErr: ErrBusy},
		{name: "busy elsewhere past its bound", err: ErrBusy, elsewhere: true,
			w: Waiter{BusyStep: time.Millisecond, waitedOther: BusyElsewhereMax}, wantErr: ErrBusy},
		{name: "the budget held by calls in flight", err: ErrWait, again: true},
		{name: "the budget held past WaitMax", err: ErrWait, w: Waiter{budgetSince: time.Now().Add(-WaitMax - time.Second)}, kind: Contended},
		{name: "paused, resumed", err: ErrPaused, w: Waiter{PauseHold: time.Minute, Resumes: resumes(true)}, again: true},
		{name: "admission paused, resumed", paused: true, w: Waiter{PauseHold: time.Minute, Resumes: resumes(true)}, again: true},
		{name: "paused past pause_hold", err: ErrPaused, w: Waiter{Resumes: resumes(false)}, kind: Paused},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.w
			w.Tenant, w.Store = "team-a", st
			again, err := w.Wait(ctx, "run", tc.err, tc.paused, tc.elsewhere)
			if again != tc.again {
				t.Fatalf("again = %v, want %v (error %v)", again, tc.again, err)
			}
			switch {
			case tc.kind != 0:
				if refusalKind(err) != tc.kind {
					t.Fatalf("Wait = %v, want a refusal of kind %d", err, tc.kind)
				}
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Wait = %v, want %v", err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("Wait = %v", err)
			}
		})
	}
	t.Run("a canceled wait ends", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		w := Waiter{Tenant: "team-a", Store: st, PauseHold: time.Minute, Resumes: resumes(false)}
		if again, err := w.Wait(cctx, "run", ErrPaused, false, false); again || !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait = %v %v, want canceled", again, err)
		}
	})
}

func TestFork(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name        string
		maxChildren int
		busy        int // records busy, in order
		want        string
		kind        Kind
	}{
		{name: "the base record", busy: 0, want: "run"},
		{name: "the first free sibling", busy: 2, want: threadid.Sibling("run", "run", 3)},
		{name: "every sibling busy", busy: threadid.MaxSiblings, kind: Contended},
		{name: "the parent's children full", maxChildren: 1, busy: 2, kind: Contended},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecords(t, tc.maxChildren)
			if _, err := r.Root(ctx, "run", true, &config.Tenant{Name: "team-a"}); err != nil {
				t.Fatal(err)
			}
			var tried []string
			err := r.Fork(ctx, "run", "run", "team-a", "k", func(id string) error {
				tried = append(tried, id)
				if len(tried) <= tc.busy {
					return ErrBusy
				}
				return nil
			})
			if tc.kind != 0 {
				if refusalKind(err) != tc.kind {
					t.Fatalf("Fork = %v after %v, want a refusal of kind %d", err, tried, tc.kind)
				}
				return
			}
			if err != nil || tried[len(tried)-1] != tc.want {
				t.Fatalf("Fork = %v after %v, want admitted on %s", err, tried, tc.want)
			}
			for _, id := range tried[1:] {
				if _, err := r.Store.Get(ctx, id); err != nil {
					t.Errorf("sibling %s: %v", id, err)
				}
			}
		})
	}
}

func TestThread(t *testing.T) {
	ctx := context.Background()
	r := newRecords(t, 1)
	if _, err := r.Root(ctx, "run", true, &config.Tenant{Name: "team-a"}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		id     string
		shared bool
	}{{"run/a", false}, {"run/a", true}} {
		key := fmt.Sprintf("k%d", i)
		id, shared, err := r.Thread(ctx, "run", "team-a", "run/"+string(rune('a'+i)), key)
		if err != nil || id != want.id || shared != want.shared {
			t.Fatalf("Thread %d = %q %v %v, want %q shared %v", i, id, shared, err, want.id, want.shared)
		}
	}
}

func TestPlace(t *testing.T) {
	ctx := context.Background()
	tn := &config.Tenant{Name: "team-a"}
	r := newRecords(t, 1)
	if _, err := r.Root(ctx, "run", true, tn); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Store.UpdateChain(ctx, "run", func(c []*trajectory.Record) ([]trajectory.Event, error) {
		c[0].Thread = "first"
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, key, parentKey string
		want                 Hint
		shared               bool
	}{
		{name: "the root's own conversation", key: "first", want: Hint{Parent: "run", Base: "run"}},
		{name: "another conversation is a child", key: "second", want: Hint{Parent: "run", Base: threadid.Child("run", "second")}},
		{name: "past max_children the last child is shared", key: "third", want: Hint{Parent: "run", Base: threadid.Child("run", "second")}, shared: true},
		{name: "a child of a thread", key: "sub", parentKey: "second",
			want: Hint{Parent: threadid.Child("run", "second"), Base: threadid.Child(threadid.Child("run", "second"), "sub")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root, h, shared, err := r.Place(ctx, "run", true, tn, tc.key, tc.parentKey)
			if err != nil || root.ID != "run" || h != tc.want || shared != tc.shared {
				t.Fatalf("Place = %v %+v %v %v, want %+v shared %v", root, h, shared, err, tc.want, tc.shared)
			}
		})
	}
}
