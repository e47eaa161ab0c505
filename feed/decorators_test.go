package feed

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"gatekeeper/approvals"
	"gatekeeper/store/memory"
	"gatekeeper/trajectory"
)

// collected reads n events from s.
func collected(t *testing.T, s *Subscription, n int) []Event {
	t.Helper()
	out := make([]Event, n)
	for i := range out {
		out[i] = next(t, s)
	}
	return out
}

func TestRecordsPublishWhatTheStoreSaved(t *testing.T) {
	f := openFeed(t, Options{})
	s := subscribe(t, f, Filter{}, ID{})
	st := NewRecords(memory.New(memory.Options{}), f)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0).UTC()
	root := trajectory.New("run-1", "team-a", now)
	root.Person = &trajectory.Person{Subject: "00u1", Email: "ada@example.com", Groups: []string{"eng"}}
	if err := st.Create(ctx, root, trajectory.Event{At: now, Trajectory: "run-1", Type: trajectory.EventCreated}); err != nil {
		t.Fatal(err)
	}
	child := trajectory.New("run-1/3f", "team-a", now)
	child.ParentID = "run-1"
	child.Person = root.Person.Clone()
	if err := st.CreateChild(ctx, child, 1); err != nil {
		t.Fatal(err)
	}
	// A child refused by its bound publishes nothing.
	other := trajectory.New("run-1/40", "team-a", now)
	other.ParentID = "run-1"
	if err := st.CreateChild(ctx, other, 1); !errors.As(err, new(*trajectory.ChildrenFullError)) {
		t.Fatalf("a second child under a bound of 1: %v", err)
	}
	// An aborted update publishes nothing.
	if _, err := st.Update(ctx, "run-1", func(*trajectory.Record) ([]trajectory.Event, error) { return nil, context.Canceled }); err == nil {
		t.Fatal("the aborted update succeeded")
	}
	_, err := st.UpdateChain(ctx, "run-1/3f", func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		for _, r := range chain {
			r.Spend.Dollars += 0.5
		}
		return []trajectory.Event{
			{At: now, Type: trajectory.EventTurn, Data: json.RawMessage(`{"model":"m","dollars":0.5}`)},
			{At: now, Trajectory: "run-1", Type: trajectory.EventStage, Data: json.RawMessage(`{"from":"nominal","to":"steer"}`)},
		}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	evs := collected(t, s, 5)
	type seen struct {
		kind Kind
		traj string
		logs int
	}
	want := []seen{{KindRecord, "run-1", 1}, {KindRecord, "run-1/3f", 0}, {KindRecord, "run-1/3f", 1}, {KindTurn, "run-1/3f", 0}, {KindRecord, "run-1", 1}}
	for i, e := range evs {
		var d struct {
			Record *trajectory.Record `json:"record"`
			Events []trajectory.Event `json:"events"`
		}
		if e.Kind == KindRecord {
			if err := json.Unmarshal(e.Data, &d); err != nil || d.Record == nil {
				t.Fatalf("event %d: data %s: %v", i, e.Data, err)
			}
			if d.Record.ID != e.Trajectory || e.Tenant != "team-a" {
				t.Errorf("event %d names %s/%s, carries %s", i, e.Tenant, e.Trajectory, d.Record.ID)
			}
		}
		if got := (seen{e.Kind, e.Trajectory, len(d.Events)}); got != want[i] {
			t.Errorf("event %d = %+v, want %+v", i, got, want[i])
		}
		if e.Kind == KindRecord && e.Trajectory == "run-1" && (d.Record.Person == nil || d.Record.Person.Email != "ada@example.com" || d.Record.Person.Groups[0] != "eng") {
			t.Errorf("event %d: the run's record event names person %+v, want the one who started it", i, d.Record.Person)
		}
		if i == 2 && d.Record.Spend.Dollars != 0.5 {
			t.Errorf("the child's record event shows $%v spent, want the saved 0.5", d.Record.Spend.Dollars)
		}
		if e.Kind == KindTurn && string(e.Data) != `{"model":"m","dollars":0.5}` {
			t.Errorf("turn data = %s", e.Data)
		}
		if e.Kind == KindTurn && (e.Person != "ada@example.com" || len(e.Groups) != 1 || e.Groups[0] != "eng") {
			t.Errorf("the turn event names person %q groups %q, want the one who started the run", e.Person, e.Groups)
		}
	}
	if _, ok := any(st).(trajectory.Signals); !ok {
		t.Error("the decorated store no longer carries signals")
	}
}

func TestApprovalsPublishRequestsVotesAndDecisions(t *testing.T) {
	f := openFeed(t, Options{})
	s := subscribe(t, f, Filter{Kinds: []Kind{KindApproval}}, ID{})
	now := time.Unix(1_800_000_000, 0).UTC()
	clock := func() time.Time { return now }
	svc := approvals.NewService(approvals.ServiceOptions{Store: NewApprovals(memory.NewApprovals(memory.ApprovalsOptions{}), f), Clock: clock})
	t.Cleanup(func() { _ = svc.Close(context.Background()) })
	ctx := context.Background()
	call, err := approvals.Canonical("Bash", []byte(`{"command":"rm -rf /srv"}`))
	if err != nil {
		t.Fatal(err)
	}
	open := func(key string, quorum int) *approvals.Request {
		r := &approvals.Request{Call: call, Digest: call.Digest(), Gate: "g", Roles: []string{"secops"}, Quorum: quorum, ExpiresAt: now.Add(time.Minute)}
		if _, err := svc.Open(ctx, &approvals.Hold{Trajectory: "run-1", Root: "run-1", Tenant: "team-a", Key: key}, []*approvals.Request{r}); err != nil {
			t.Fatal(err)
		}
		return r
	}
	two := open("k1", 2)
	vote := func(id, who string) {
		if _, err := svc.Vote(ctx, id, approvals.Vote{Approver: who, Roles: []string{"secops"}, Approve: true, Via: approvals.ViaAdmin}); err != nil {
			t.Fatal(err)
		}
	}
	vote(two.ID, "carol")
	vote(two.ID, "dave")
	late := open("k2", 1)
	now = now.Add(2 * time.Minute)
	if n := svc.Sweep(ctx); n != 1 {
		t.Fatalf("swept %d, want 1", n)
	}
	want := []struct {
		change string
		id     string
		state  approvals.State
	}{
		{ChangeRequested, two.ID, approvals.Pending}, {ChangeVote, two.ID, approvals.Pending},
		{ChangeDecided, two.ID, approvals.Approved}, {ChangeRequested, late.ID, approvals.Pending},
		{ChangeExpired, late.ID, approvals.Expired},
	}
	for i, e := range collected(t, s, len(want)) {
		var d struct {
			Change  string             `json:"change"`
			Request *approvals.Request `json:"request"`
		}
		if err := json.Unmarshal(e.Data, &d); err != nil || d.Request == nil {
			t.Fatalf("event %d: %s: %v", i, e.Data, err)
		}
		if d.Change != want[i].change || d.Request.ID != want[i].id || d.Request.State != want[i].state || e.Tenant != "team-a" || e.Trajectory != "run-1" {
			t.Errorf("event %d = %s %s %s (%s/%s), want %+v", i, d.Change, d.Request.ID, d.Request.State, e.Tenant, e.Trajectory, want[i])
		}
		if string(d.Request.Call.Input) != `{"command":"rm -rf /srv"}` {
			t.Errorf("event %d carries the call %s, want it whole", i, d.Request.Call.Input)
		}
	}
}

func TestKeysPublishChangesOnly(t *testing.T) {
	f := openFeed(t, Options{})
	s := subscribe(t, f, Filter{}, ID{})
	k := NewKeys(f, nil)
	k.flush() // nothing yet: nothing published
	k.Headroom("anthropic/main", 0.5)
	k.QueueLength("batch", 2)
	k.flush()
	k.flush() // unchanged: nothing
	k.Headroom("anthropic/main", 0.5)
	k.flush() // the same value: nothing
	k.QueueLength("batch", 0)
	k.flush()
	var got []KeysSnapshot
	for _, e := range collected(t, s, 2) {
		var d KeysSnapshot
		if err := json.Unmarshal(e.Data, &d); err != nil || e.Kind != KindKeys {
			t.Fatalf("%s %s: %v", e.Kind, e.Data, err)
		}
		got = append(got, d)
	}
	if got[0].Headroom["anthropic/main"] != 0.5 || got[0].Queues["batch"] != 2 || got[1].Queues["batch"] != 0 {
		t.Errorf("published %+v", got)
	}
	if snap := k.Snapshot(); snap.Queues["batch"] != 0 || snap.Headroom["anthropic/main"] != 0.5 {
		t.Errorf("snapshot %+v", snap)
	}
	// Nothing more was published: a fresh event is the next one read.
	f.Publish(event(KindTurn, "", "", 9))
	if e := next(t, s); e.Kind != KindTurn {
		t.Errorf("after the two flushes that changed something, got another %s event", e.Kind)
	}
}
