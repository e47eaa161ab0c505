package memory

import (
	"context"
	"testing"
	"time"

	"gatekeeper/approvals"
	"gatekeeper/store/storetest"
)

func TestApprovalsContract(t *testing.T) {
	storetest.RunApprovals(t, func(t *testing.T) approvals.Store {
		return NewApprovals(ApprovalsOptions{})
	})
}

func TestApprovalsRetention(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	a := NewApprovals(ApprovalsOptions{Retention: time.Hour, Clock: func() time.Time { return now }})
	ctx := context.Background()
	call, _ := approvals.Canonical("Bash", []byte(`{}`))
	h := &approvals.Hold{ID: "hold_1", Trajectory: "run-1", Key: "k", CreatedAt: now, ExpiresAt: now.Add(time.Minute)}
	r := &approvals.Request{ID: "apr_1", Trajectory: "run-1", Call: call, Digest: call.Digest(), State: approvals.Pending, CreatedAt: now, ExpiresAt: now.Add(time.Minute)}
	if _, err := a.CreateHold(ctx, h, []*approvals.Request{r}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := a.Claim(ctx, "c", time.Minute); !ok {
		t.Fatal("first claim refused")
	}
	now = now.Add(30 * time.Second)
	if ok, _ := a.Claim(ctx, "c", time.Minute); ok {
		t.Fatal("claim replayed within its ttl")
	}
	now = now.Add(2 * time.Hour)
	if ok, _ := a.Claim(ctx, "c", time.Minute); !ok {
		t.Fatal("claim still held after its ttl")
	}
	// The next create collects what is past its retention.
	h2 := &approvals.Hold{ID: "hold_2", Trajectory: "run-2", Key: "k", CreatedAt: now, ExpiresAt: now.Add(time.Minute)}
	if _, err := a.CreateHold(ctx, h2, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(ctx, "apr_1"); err == nil {
		t.Error("a request past its retention is still kept")
	}
	if _, err := a.FindHold(ctx, "run-1", "k"); err == nil {
		t.Error("a hold past its retention is still kept")
	}
}
