package approvals

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func pending(roles []string, quorum int, distinct bool) *Request {
	c, _ := Canonical("Bash", []byte(`{"command":"rm -rf /srv"}`))
	return &Request{
		ID: "apr_1", Tenant: "team-a", Call: c, Digest: c.Digest(), Gate: "destructive-shell",
		Roles: roles, Quorum: quorum, DistinctRoles: distinct,
		CreatedAt: t0, ExpiresAt: t0.Add(15 * time.Minute), State: Pending,
	}
}

func approve(who string, roles ...string) Vote {
	return Vote{Approver: who, Roles: roles, Approve: true, Via: ViaAdmin}
}

func deny(who, reason string, roles ...string) Vote {
	return Vote{Approver: who, Roles: roles, Reason: reason, Via: ViaAdmin}
}

func TestCast(t *testing.T) {
	type step struct {
		vote    Vote
		at      time.Duration // after t0
		decided bool
		err     error
	}
	tests := []struct {
		name     string
		roles    []string
		quorum   int
		distinct bool
		steps    []step
		want     State
	}{
		{"quorum 1", []string{"secops"}, 1, false, []step{
			{vote: approve("carol", "secops"), decided: true},
		}, Approved},
		{"quorum 2 of distinct people", []string{"secops"}, 2, false, []step{
			{vote: approve("carol", "secops")},
			{vote: approve("dave", "secops"), decided: true},
		}, Approved},
		{"one person voting twice", []string{"secops"}, 2, false, []step{
			{vote: approve("carol", "secops")},
			{vote: approve("carol", "secops"), err: ErrAlreadyVoted},
		}, Pending},
		{"voter of other tenants", []string{"secops"}, 1, false, []step{
			{vote: Vote{Approver: "carol", Roles: []string{"secops"}, Approve: true, Tenants: []string{"team-b"}}, err: ErrNotFound},
			{vote: Vote{Approver: "carol", Roles: []string{"secops"}, Approve: true, Tenants: []string{"team-b", "team-a"}}, decided: true},
		}, Approved},
		{"admin role form", []string{"secops"}, 1, false, []step{
			{vote: approve("carol", "operator", "approver:secops"), decided: true},
		}, Approved},
		{"distinct roles: secops and sre", []string{"secops", "sre"}, 2, true, []step{
			{vote: approve("carol", "secops")},
			{vote: approve("erin", "sre"), decided: true},
		}, Approved},
		{"distinct roles: two secops are not enough", []string{"secops", "sre"}, 2, true, []step{
			{vote: approve("carol", "secops")},
			{vote: approve("dave", "secops")},
		}, Pending},
		{"distinct roles: one person with both roles satisfies one", []string{"secops", "sre"}, 2, true, []step{
			{vote: approve("frank", "secops", "sre")},
			{vote: approve("frank", "secops", "sre"), err: ErrAlreadyVoted},
		}, Pending},
		{"distinct roles: both-roles person plus secops", []string{"secops", "sre"}, 2, true, []step{
			{vote: approve("frank", "secops", "sre")},
			{vote: approve("carol", "secops"), decided: true},
		}, Approved},
		{"deny decides", []string{"secops"}, 2, false, []step{
			{vote: approve("carol", "secops")},
			{vote: deny("dave", "not on prod", "secops"), decided: true},
		}, Denied},
		{"vote after decision", []string{"secops"}, 1, false, []step{
			{vote: deny("dave", "", "secops"), decided: true},
			{vote: approve("carol", "secops"), err: ErrDecided},
		}, Denied},
		{"vote after expiry", []string{"secops"}, 1, false, []step{
			{vote: approve("carol", "secops"), at: 15 * time.Minute, err: ErrExpired},
		}, Expired},
		{"non-approver", []string{"secops"}, 1, false, []step{
			{vote: approve("mallory", "operator"), err: ErrNotApprover},
			{vote: approve("mallory", "approver"), err: ErrNotApprover},
			{vote: approve(""), err: ErrNotApprover},
		}, Pending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := pending(tt.roles, tt.quorum, tt.distinct)
			for i, s := range tt.steps {
				decided, err := r.Cast(s.vote, t0.Add(time.Minute+s.at))
				if !errors.Is(err, s.err) || (err == nil) != (s.err == nil) {
					t.Fatalf("step %d: err = %v, want %v", i, err, s.err)
				}
				if decided != s.decided {
					t.Fatalf("step %d: decided = %v, want %v", i, decided, s.decided)
				}
			}
			if r.State != tt.want {
				t.Errorf("state = %s, want %s", r.State, tt.want)
			}
			if (r.State != Pending) != (r.DecidedAt != nil) {
				t.Errorf("state %s with DecidedAt %v", r.State, r.DecidedAt)
			}
		})
	}
}

func TestCastCountsOnlyRecordedVotes(t *testing.T) {
	r := pending([]string{"secops"}, 2, false)
	if _, err := r.Cast(approve("mallory", "sre"), t0); err == nil {
		t.Fatal("a vote without the role was accepted")
	}
	if len(r.Votes) != 0 {
		t.Fatalf("a refused vote was recorded: %+v", r.Votes)
	}
	if _, err := r.Cast(approve("carol", "secops"), t0); err != nil {
		t.Fatal(err)
	}
	if len(r.Votes) != 1 || r.Votes[0].At != t0 {
		t.Fatalf("votes = %+v, want one at t0", r.Votes)
	}
}

func TestExpire(t *testing.T) {
	r := pending([]string{"secops"}, 1, false)
	if r.Expire(r.ExpiresAt.Add(-time.Nanosecond)) {
		t.Fatal("expired before ExpiresAt")
	}
	if !r.Expire(r.ExpiresAt) {
		t.Fatal("not expired at ExpiresAt")
	}
	if r.State != Expired || r.Reason != "expired" {
		t.Fatalf("state %s reason %q", r.State, r.Reason)
	}
	if r.Expire(r.ExpiresAt.Add(time.Hour)) {
		t.Fatal("expired twice")
	}
}

func TestRefusal(t *testing.T) {
	tests := []struct {
		state  State
		reason string
	}{
		{Denied, ReasonDenied},
		{Expired, ReasonExpired},
		{Stale, ReasonStale},
		{Withdrawn, ReasonStale},
	}
	for _, tt := range tests {
		t.Run(string(tt.state), func(t *testing.T) {
			r := pending([]string{"secops"}, 1, false)
			if tt.state == Denied {
				if _, err := r.Cast(deny("dave", "production is frozen", "secops"), t0); err != nil {
					t.Fatal(err)
				}
			} else {
				r.decide(tt.state, t0, "x")
			}
			if got := r.RefusalReason(); got != tt.reason {
				t.Fatalf("RefusalReason() = %q, want %q", got, tt.reason)
			}
			var got map[string]string
			if err := json.Unmarshal(r.Refusal(), &got); err != nil {
				t.Fatal(err)
			}
			if got["status"] != "REFUSED" || got["reason"] != tt.reason || got["call"] != "Bash" || got["message"] == "" {
				t.Errorf("Refusal() = %v", got)
			}
			if len(got) != 4 {
				t.Errorf("Refusal() has fields beyond status, reason, call, message: %v", got)
			}
			if tt.state == Denied && !strings.Contains(got["message"], "production is frozen") {
				t.Errorf("the deny reason is missing from %q", got["message"])
			}
			if strings.Contains(got["message"], "dave") {
				t.Errorf("the refusal names the approver: %q", got["message"])
			}
		})
	}
	if got := pending(nil, 1, false).RefusalReason(); got != "" {
		t.Errorf("pending RefusalReason() = %q", got)
	}
}

func TestMarkStale(t *testing.T) {
	r := pending([]string{"secops"}, 1, false)
	if err := r.MarkStale(Approved, "x", t0); err == nil {
		t.Fatal("MarkStale(Approved) accepted")
	}
	if err := r.MarkStale(Stale, "budget halted", t0); err != nil {
		t.Fatal(err)
	}
	if err := r.MarkStale(Withdrawn, "again", t0); !errors.Is(err, ErrDecided) {
		t.Fatalf("err = %v, want ErrDecided", err)
	}
	if r.State != Stale || r.Reason != "budget halted" {
		t.Fatalf("state %s reason %q", r.State, r.Reason)
	}
}

func TestPreview(t *testing.T) {
	c := Call{Name: "Write", Input: json.RawMessage(`{"content":"` + strings.Repeat("é", 800) + `"}`)}
	p := Preview(c)
	if n := len([]rune(p)); n != MaxPreview {
		t.Errorf("preview has %d characters, want %d", n, MaxPreview)
	}
	if !strings.HasPrefix(p, "Write {") {
		t.Errorf("preview %q does not start with the call", p[:20])
	}
}

func TestClone(t *testing.T) {
	r := pending([]string{"secops"}, 1, false)
	r.Channels = map[string]string{"slack.ts": "1"}
	if _, err := r.Cast(approve("carol", "secops"), t0); err != nil {
		t.Fatal(err)
	}
	c := r.Clone()
	c.Votes[0].Roles[0] = "x"
	c.Roles[0] = "y"
	c.Channels["slack.ts"] = "2"
	*c.DecidedAt = t0.Add(time.Hour)
	if r.Votes[0].Roles[0] != "secops" || r.Roles[0] != "secops" || r.Channels["slack.ts"] != "1" || !r.DecidedAt.Equal(t0) {
		t.Errorf("Clone shares memory with the original")
	}
}
