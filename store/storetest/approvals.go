package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gatekeeper/approvals"
)

// RunApprovals runs the contract suite of approvals.Store. newStore must
// return an empty store that no other test shares.
func RunApprovals(t *testing.T, newStore func(t *testing.T) approvals.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s approvals.Store)
	}{
		{"CreateGet", testApprovalsCreateGet},
		{"DuplicateKey", testApprovalsDuplicateKey},
		{"HoldChain", testApprovalsHoldChain},
		{"NotFound", testApprovalsNotFound},
		{"UpdateSaves", testApprovalsUpdateSaves},
		{"UpdateErrorSavesNothing", testApprovalsUpdateError},
		{"ConcurrentVotes", testApprovalsConcurrentVotes},
		{"ConcurrentHoldUpdates", testApprovalsConcurrentHold},
		{"DueOrdering", testApprovalsDue},
		{"Recent", testApprovalsRecent},
		{"Claim", testApprovalsClaim},
		{"ListFilters", testApprovalsList},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore(t)) })
	}
}

// at0 has no monotonic reading and is in UTC, so a store that serializes
// requests gives back exactly what it was handed.
var at0 = time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC)

// heldTurn is a hold of trajectory with n pending requests, created at
// created and expiring 15 minutes later.
func heldTurn(t *testing.T, trajectory, key string, n int, created time.Time) (*approvals.Hold, []*approvals.Request) {
	t.Helper()
	root, _, _ := strings.Cut(trajectory, "/")
	h := &approvals.Hold{
		ID: approvals.NewID("hold_"), Trajectory: trajectory, Root: root, Tenant: "team-a", Key: key,
		API: "anthropic", Streamed: true, Provider: "anthropic", Model: "claude",
		Request: []byte(`{"messages":[]}`), Reply: []byte("event: message_start\ndata: {}\n\n"),
		Calls: []string{"toolu_1", "toolu_2"}, State: approvals.Holding, Generation: 1,
		CreatedAt: created, ExpiresAt: created.Add(15 * time.Minute),
	}
	var reqs []*approvals.Request
	for i := range n {
		call, err := approvals.Canonical("Bash", fmt.Appendf(nil, `{"command":"rm -rf /tmp/%d"}`, i))
		if err != nil {
			t.Fatal(err)
		}
		r := &approvals.Request{
			ID: approvals.NewID("apr_"), Hold: h.ID, Trajectory: trajectory, Root: root, Thread: "agent-1",
			Tenant: "team-a", CallID: fmt.Sprintf("toolu_%d", i+1), Call: call, Digest: call.Digest(),
			Gate: "destructive-shell", Why: `tool.name == "Bash"`, Preview: approvals.Preview(call),
			Observed: approvals.Observed{State: "CALLING_MODEL", Stage: "normal", BudgetUsed: 0.25, Grant: []string{"Bash"}},
			Roles:    []string{"secops", "sre"}, Quorum: 1, OnRefusal: "continue",
			CreatedAt: created, ExpiresAt: created.Add(15 * time.Minute), State: approvals.Pending,
			Channels: map[string]string{"slack.ts": "1.2"},
		}
		h.Requests = append(h.Requests, r.ID)
		reqs = append(reqs, r)
	}
	return h, reqs
}

func create(t *testing.T, s approvals.Store, h *approvals.Hold, reqs []*approvals.Request) {
	t.Helper()
	if _, err := s.CreateHold(context.Background(), h, reqs); err != nil {
		t.Fatalf("CreateHold: %v", err)
	}
}

func testApprovalsCreateGet(t *testing.T, s approvals.Store) {
	ctx := context.Background()
	h, reqs := heldTurn(t, "run-1/agent-1", "turn-a", 2, at0)
	got, err := s.CreateHold(ctx, h, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if !equalJSON(t, got, h) {
		t.Errorf("CreateHold returned %+v, want %+v", got, h)
	}
	got.Reply[0] = 'X' // a copy: the store must not see this
	for _, load := range []func() (*approvals.Hold, error){
		func() (*approvals.Hold, error) { return s.GetHold(ctx, h.ID) },
		func() (*approvals.Hold, error) { return s.FindHold(ctx, h.Trajectory, h.Key) },
	} {
		g, err := load()
		if err != nil {
			t.Fatal(err)
		}
		if !equalJSON(t, g, h) {
			t.Errorf("read back %+v, want %+v", g, h)
		}
	}
	for _, r := range reqs {
		g, err := s.Get(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !equalJSON(t, g, r) {
			t.Errorf("Get(%s) = %+v, want %+v", r.ID, g, r)
		}
		g.Roles[0] = "changed"
		if again, _ := s.Get(ctx, r.ID); again.Roles[0] != "secops" {
			t.Errorf("a change to a returned request reached the store")
		}
	}
}

func testApprovalsDuplicateKey(t *testing.T, s approvals.Store) {
	ctx := context.Background()
	h1, r1 := heldTurn(t, "run-1", "turn-a", 1, at0)
	create(t, s, h1, r1)
	h2, r2 := heldTurn(t, "run-1", "turn-a", 1, at0.Add(time.Second))
	got, err := s.CreateHold(ctx, h2, r2)
	if !errors.Is(err, approvals.ErrExists) {
		t.Fatalf("second CreateHold: err = %v, want ErrExists", err)
	}
	if got == nil || got.ID != h1.ID {
		t.Fatalf("second CreateHold returned %+v, want the first hold", got)
	}
	if _, err := s.GetHold(ctx, h2.ID); !errors.Is(err, approvals.ErrNotFound) {
		t.Errorf("the refused hold was stored: %v", err)
	}
	if _, err := s.Get(ctx, r2[0].ID); !errors.Is(err, approvals.ErrNotFound) {
		t.Errorf("the refused hold's request was stored: %v", err)
	}
	// The same key in another trajectory is another turn.
	h3, r3 := heldTurn(t, "run-2", "turn-a", 1, at0)
	create(t, s, h3, r3)
}

// A hold that names the turn's latest hold as its Previous becomes the
// turn's latest; one that names an earlier hold, or none, is refused with
// the latest. Every hold of the chain stays readable by id, with its place
// in the chain.
func testApprovalsHoldChain(t *testing.T, s approvals.Store) {
	ctx := context.Background()
	h1, r1 := heldTurn(t, "run-1/agent-1", "turn-a", 1, at0)
	create(t, s, h1, r1)
	h2, r2 := heldTurn(t, "run-1/agent-1", "turn-a", 1, at0.Add(time.Second))
	h2.Generation, h2.Previous = 2, h1.ID
	create(t, s, h2, r2)
	latest, err := s.FindHold(ctx, h1.Trajectory, "turn-a")
	if err != nil || latest.ID != h2.ID || latest.Generation != 2 || latest.Previous != h1.ID {
		t.Fatalf("FindHold after the second generation = %+v, %v; want %s (generation 2 after %s)", latest, err, h2.ID, h1.ID)
	}
	if first, err := s.GetHold(ctx, h1.ID); err != nil || !equalJSON(t, first, h1) {
		t.Errorf("GetHold of the first generation = %+v, %v", first, err)
	}
	for _, prev := range []string{h1.ID, ""} {
		h3, r3 := heldTurn(t, "run-1/agent-1", "turn-a", 1, at0.Add(2*time.Second))
		h3.Generation, h3.Previous = 2, prev
		got, err := s.CreateHold(ctx, h3, r3)
		if !errors.Is(err, approvals.ErrExists) || got == nil || got.ID != h2.ID {
			t.Fatalf("CreateHold after %q, which is not the latest: %+v, %v; want ErrExists and %s", prev, got, err, h2.ID)
		}
		if _, err := s.GetHold(ctx, h3.ID); !errors.Is(err, approvals.ErrNotFound) {
			t.Errorf("the refused hold was stored: %v", err)
		}
	}
}

func testApprovalsNotFound(t *testing.T, s approvals.Store) {
	ctx := context.Background()
	checks := map[string]error{}
	_, checks["GetHold"] = s.GetHold(ctx, "hold_none")
	_, checks["FindHold"] = s.FindHold(ctx, "run-1", "nokey")
	_, checks["Get"] = s.Get(ctx, "apr_none")
	_, checks["Recent"] = s.Recent(ctx, "run-1", "sha256:00")
	_, checks["Update"] = s.Update(ctx, "apr_none", func(*approvals.Request) error { return nil })
	_, checks["UpdateHold"] = s.UpdateHold(ctx, "hold_none", func(*approvals.Hold) error { return nil })
	for name, err := range checks {
		if !errors.Is(err, approvals.ErrNotFound) {
			t.Errorf("%s: err = %v, want ErrNotFound", name, err)
		}
	}
}

func testApprovalsUpdateSaves(t *testing.T, s approvals.Store) {
	ctx := context.Background()
	h, reqs := heldTurn(t, "run-1", "turn-a", 1, at0)
	create(t, s, h, reqs)
	got, err := s.Update(ctx, reqs[0].ID, func(r *approvals.Request) error {
		_, err := r.Cast(approvals.Vote{Approver: "carol", Roles: []string{"secops"}, Approve: true, Via: "admin"}, at0.Add(time.Minute))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != approvals.Approved || len(got.Votes) != 1 {
		t.Fatalf("Update returned %+v", got)
	}
	read, err := s.Get(ctx, reqs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if !equalJSON(t, read, got) {
		t.Errorf("read back %+v, want %+v", read, got)
	}
	hold, err := s.UpdateHold(ctx, h.ID, func(h *approvals.Hold) error {
		h.State, h.Delivered, h.Continuations = approvals.Released, true, 1
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := s.FindHold(ctx, h.Trajectory, h.Key); !equalJSON(t, again, hold) || !again.Delivered {
		t.Errorf("FindHold after UpdateHold = %+v", again)
	}
}

func testApprovalsUpdateError(t *testing.T, s approvals.Store) {
	ctx := context.Background()
	h, reqs := heldTurn(t, "run-1", "turn-a", 1, at0)
	create(t, s, h, reqs)
	boom := errors.New("boom")
	_, err := s.Update(ctx, reqs[0].ID, func(r *approvals.Request) error {
		r.State = approvals.Denied
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want fn's error", err)
	}
	_, err = s.UpdateHold(ctx, h.ID, func(h *approvals.Hold) error {
		h.Delivered = true
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("UpdateHold err = %v, want fn's error", err)
	}
	if r, _ := s.Get(ctx, reqs[0].ID); r.State != approvals.Pending {
		t.Errorf("a failed Update saved state %s", r.State)
	}
	if hh, _ := s.GetHold(ctx, h.ID); hh.Delivered {
		t.Errorf("a failed UpdateHold saved")
	}
}

// testApprovalsConcurrentVotes has many people vote on one request at
// once: every vote must be counted, none lost to a race.
func testApprovalsConcurrentVotes(t *testing.T, s approvals.Store) {
	ctx := context.Background()
	h, reqs := heldTurn(t, "run-1", "turn-a", 1, at0)
	const voters = 16
	reqs[0].Quorum = voters + 1 // nobody decides it
	create(t, s, h, reqs)
	var wg sync.WaitGroup
	errs := make(chan error, voters)
	for i := range voters {
		wg.Go(func() {
			_, err := s.Update(ctx, reqs[0].ID, func(r *approvals.Request) error {
				_, err := r.Cast(approvals.Vote{Approver: fmt.Sprintf("p%d", i), Roles: []string{"sre"}, Approve: true}, at0)
				return err
			})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("vote: %v", err)
		}
	}
	r, err := s.Get(ctx, reqs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Votes) != voters {
		t.Errorf("%d votes recorded, want %d", len(r.Votes), voters)
	}
}

// testApprovalsConcurrentHold has several clients claim one hold's delivery
// at once: exactly one wins.
func testApprovalsConcurrentHold(t *testing.T, s approvals.Store) {
	ctx := context.Background()
	h, reqs := heldTurn(t, "run-1", "turn-a", 1, at0)
	create(t, s, h, reqs)
	errDelivered := errors.New("delivered already")
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for range 8 {
		wg.Go(func() {
			_, err := s.UpdateHold(ctx, h.ID, func(h *approvals.Hold) error {
				if h.Delivered {
					return errDelivered
				}
				h.Delivered = true
				return nil
			})
			if err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			} else if !errors.Is(err, errDelivered) {
				t.Errorf("UpdateHold: %v", err)
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Errorf("%d clients claimed the delivery, want 1", wins)
	}
}

func testApprovalsDue(t *testing.T, s approvals.Store) {
	ctx := context.Background()
	var all []*approvals.Request
	for i, offset := range []time.Duration{3 * time.Minute, time.Minute, 2 * time.Minute, 10 * time.Minute} {
		h, reqs := heldTurn(t, fmt.Sprintf("run-%d", i), "k", 1, at0)
		reqs[0].ExpiresAt = at0.Add(offset)
		h.ExpiresAt = reqs[0].ExpiresAt
		create(t, s, h, reqs)
		all = append(all, reqs[0])
	}
	// A decided request is never due.
	if _, err := s.Update(ctx, all[2].ID, func(r *approvals.Request) error {
		_, err := r.Cast(approvals.Vote{Approver: "carol", Roles: []string{"secops"}}, at0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	due, err := s.Due(ctx, at0.Add(5*time.Minute), 10)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(due), []string{all[1].ID, all[0].ID}; !slices.Equal(got, want) {
		t.Errorf("Due = %v, want %v (oldest expiry first)", got, want)
	}
	due, err = s.Due(ctx, at0.Add(time.Hour), 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(due), []string{all[1].ID, all[0].ID}; !slices.Equal(got, want) {
		t.Errorf("Due with limit 2 = %v, want %v", got, want)
	}
	due, err = s.Due(ctx, at0.Add(time.Minute), 10) // ExpiresAt == t is due
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(due), []string{all[1].ID}; !slices.Equal(got, want) {
		t.Errorf("Due at the expiry = %v, want %v", got, want)
	}
}

func testApprovalsRecent(t *testing.T, s approvals.Store) {
	ctx := context.Background()
	h1, r1 := heldTurn(t, "run-1/agent-1", "k1", 1, at0)
	create(t, s, h1, r1)
	h2, r2 := heldTurn(t, "run-1/agent-1", "k2", 1, at0.Add(time.Minute))
	create(t, s, h2, r2) // same call, later
	h3, r3 := heldTurn(t, "run-1/agent-2", "k1", 1, at0.Add(2*time.Minute))
	create(t, s, h3, r3) // same call, another thread
	got, err := s.Recent(ctx, "run-1/agent-1", r1[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != r2[0].ID {
		t.Errorf("Recent = %s, want the latest %s", got.ID, r2[0].ID)
	}
	if _, err := s.Recent(ctx, "run-1/agent-1", "sha256:other"); !errors.Is(err, approvals.ErrNotFound) {
		t.Errorf("Recent of another digest: err = %v, want ErrNotFound", err)
	}
}

func testApprovalsClaim(t *testing.T, s approvals.Store) {
	ctx := context.Background()
	for i, want := range []bool{true, false, false} {
		got, err := s.Claim(ctx, "slack:1733130000:abc", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("claim %d = %v, want %v", i, got, want)
		}
	}
	if got, err := s.Claim(ctx, "slack:1733130000:abd", time.Hour); err != nil || !got {
		t.Errorf("another key: %v, %v", got, err)
	}
}

func testApprovalsList(t *testing.T, s approvals.Store) {
	ctx := context.Background()
	h1, r1 := heldTurn(t, "run-1/agent-1", "k", 2, at0)
	create(t, s, h1, r1)
	h2, r2 := heldTurn(t, "run-2", "k", 1, at0.Add(time.Minute))
	h2.Tenant, r2[0].Tenant = "team-b", "team-b"
	create(t, s, h2, r2)
	h3, r3 := heldTurn(t, "run-1/agent-2", "k", 1, at0.Add(2*time.Minute))
	create(t, s, h3, r3)
	if _, err := s.Update(ctx, r1[0].ID, func(r *approvals.Request) error {
		r.Expire(r.ExpiresAt)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// r1's two requests were created at the same time, so List orders
	// them by id: min, then max.
	tests := []struct {
		name string
		f    approvals.Filter
		want []string
	}{
		{"all, newest first", approvals.Filter{}, []string{r3[0].ID, r2[0].ID, min(r1[0].ID, r1[1].ID), max(r1[0].ID, r1[1].ID)}},
		{"pending", approvals.Filter{State: approvals.Pending}, []string{r3[0].ID, r2[0].ID, r1[1].ID}},
		{"expired", approvals.Filter{State: approvals.Expired}, []string{r1[0].ID}},
		{"approved", approvals.Filter{State: approvals.Approved}, nil},
		{"trajectory", approvals.Filter{Trajectory: "run-1/agent-1"}, []string{min(r1[0].ID, r1[1].ID), max(r1[0].ID, r1[1].ID)}},
		{"root", approvals.Filter{Root: "run-1"}, []string{r3[0].ID, min(r1[0].ID, r1[1].ID), max(r1[0].ID, r1[1].ID)}},
		{"root and state", approvals.Filter{Root: "run-1", State: approvals.Pending}, []string{r3[0].ID, r1[1].ID}},
		{"limit", approvals.Filter{Limit: 2}, []string{r3[0].ID, r2[0].ID}},
		{"tenants", approvals.Filter{Tenants: []string{"team-b"}}, []string{r2[0].ID}},
		{"tenants and state", approvals.Filter{Tenants: []string{"team-c", "team-a"}, State: approvals.Pending}, []string{r3[0].ID, r1[1].ID}},
		{"tenants none", approvals.Filter{Tenants: []string{"team-c"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.List(ctx, tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids(got), tt.want) {
				t.Errorf("List(%+v) = %v, want %v", tt.f, ids(got), tt.want)
			}
		})
	}
}

func ids(rs []*approvals.Request) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

// equalJSON compares two values by their JSON form, which is what a store
// that serializes keeps.
func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}
