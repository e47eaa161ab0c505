package redis

import (
	"context"
	"testing"
	"time"

	"gatekeeper/approvals"
	"gatekeeper/internal/redistest"
	"gatekeeper/signin"
	"gatekeeper/store/storetest"
)

func TestApprovalsContract(t *testing.T) {
	redistest.Each(t, func(t *testing.T, r redistest.Target) {
		storetest.RunApprovals(t, func(t *testing.T) approvals.Store {
			r.Flush(t)
			return NewApprovals(ApprovalsOptions{Client: r.Client(t)})
		})
	})
}

// TestApprovalsKeyLayout checks that a request's keys carry its root's hash
// tag and expire after the retention.
func TestApprovalsKeyLayout(t *testing.T) {
	url := redistest.Start(t)
	c := client(t, url)
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	a := NewApprovals(ApprovalsOptions{Client: c, Retention: time.Hour, Clock: func() time.Time { return now }})
	ctx := context.Background()
	call, _ := approvals.Canonical("Bash", []byte(`{"command":"ls"}`))
	h := &approvals.Hold{ID: "hold_1", Trajectory: "run-1/agent-1", Root: "run-1", Key: "turnkey", CreatedAt: now, ExpiresAt: now.Add(15 * time.Minute)}
	r := &approvals.Request{ID: "apr_1", Hold: "hold_1", Trajectory: "run-1/agent-1", Root: "run-1", Call: call, Digest: call.Digest(),
		State: approvals.Pending, CreatedAt: now, ExpiresAt: now.Add(15 * time.Minute)}
	if _, err := a.CreateHold(ctx, h, []*approvals.Request{r}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"gk:{run-1}:apr:apr_1", "gk:{run-1}:hold:hold_1", "gk:{run-1}:holdkey:run-1/agent-1:turnkey",
		"gk:{run-1}:recent:run-1/agent-1:" + call.Digest(), "gk:{apr_1}:loc", "gk:{hold_1}:loc"} {
		ttl, err := c.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 74*time.Minute || ttl > 75*time.Minute {
			t.Errorf("%s: TTL %v, want the expiry plus an hour of retention (75m)", key, ttl)
		}
	}
	if n, _ := c.ZCard(ctx, dueIndex("run-1")).Result(); n != 1 {
		t.Errorf("due index has %d entries, want 1", n)
	}
	if _, err := a.Update(ctx, "apr_1", func(r *approvals.Request) error { r.Expire(r.ExpiresAt); return nil }); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.ZCard(ctx, dueIndex("run-1")).Result(); n != 0 {
		t.Errorf("a decided request stays in the due index")
	}
	if n, _ := c.ZCard(ctx, stateIndex("run-1", approvals.Pending)).Result(); n != 0 {
		t.Errorf("a decided request stays in the pending index")
	}
	// An index entry whose request expired is dropped by the next read.
	if err := c.Del(ctx, "gk:{run-1}:apr:apr_1").Err(); err != nil {
		t.Fatal(err)
	}
	got, err := a.List(ctx, approvals.Filter{})
	if err != nil || len(got) != 0 {
		t.Fatalf("List = %v, %v; want nothing", got, err)
	}
	if n, _ := c.ZCard(ctx, allIndex("run-1")).Result(); n != 0 {
		t.Errorf("a stale index entry was kept")
	}
}

// TestApprovalsAcrossReplicas has two stores with their own connections
// vote on one request, as two replicas would.
func TestApprovalsAcrossReplicas(t *testing.T) {
	url := redistest.Start(t)
	a1 := NewApprovals(ApprovalsOptions{Client: client(t, url)})
	a2 := NewApprovals(ApprovalsOptions{Client: client(t, url)})
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	call, _ := approvals.Canonical("Bash", []byte(`{}`))
	h := &approvals.Hold{ID: "hold_x", Trajectory: "run-9", Root: "run-9", Key: "k", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	r := &approvals.Request{ID: "apr_x", Trajectory: "run-9", Root: "run-9", Call: call, Digest: call.Digest(), Roles: []string{"sre"},
		Quorum: 2, State: approvals.Pending, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if _, err := a1.CreateHold(ctx, h, []*approvals.Request{r}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	for i, a := range []*Approvals{a1, a2} {
		go func() {
			_, err := a.Update(ctx, "apr_x", func(r *approvals.Request) error {
				_, err := r.Cast(approvals.Vote{Approver: []string{"ann", "bob"}[i], Roles: []string{"sre"}, Approve: true}, now)
				return err
			})
			done <- err
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	got, err := a2.Get(ctx, "apr_x")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != approvals.Approved || len(got.Votes) != 2 {
		t.Errorf("after two votes on two replicas: state %s, %d votes", got.State, len(got.Votes))
	}
}

func TestRevocationsContract(t *testing.T) {
	redistest.Each(t, func(t *testing.T, r redistest.Target) {
		storetest.RunRevocations(t, func(t *testing.T, now func() time.Time) signin.Revocations {
			r.Flush(t)
			return NewRevocations(r.Client(t), now)
		})
	})
}
