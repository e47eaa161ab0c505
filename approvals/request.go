package approvals

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"gatekeeper/config"
)

// approverPrefix marks an admin token's approver role for a group:
// "approver:secops" lets its holder vote as "secops".
const approverPrefix = config.RoleApprover + ":"

// RoleName returns the role a config role stands for: "approver:secops" and
// "secops" are the same role.
func RoleName(role string) string { return strings.TrimPrefix(role, approverPrefix) }

// covers returns the required roles that held includes.
func covers(held, required []string) []string {
	var out []string
	for _, req := range required {
		for _, h := range held {
			if RoleName(h) == RoleName(req) {
				out = append(out, req)
				break
			}
		}
	}
	return out
}

// CanVote reports whether someone holding roles may vote on r.
func (r *Request) CanVote(roles []string) bool { return len(covers(roles, r.Roles)) > 0 }

// Approving returns how many votes on r approve, before any quorum rule.
func (r *Request) Approving() int {
	n := 0
	for _, v := range r.Votes {
		if v.Approve {
			n++
		}
	}
	return n
}

// Decided reports whether r is no longer pending.
func (r *Request) Decided() bool { return r.State != Pending }

// Cast applies one vote at now: ErrNotFound (a request of a tenant outside
// v.Tenants), ErrNotApprover (no required role),
// ErrAlreadyVoted (same approver twice), ErrDecided (not pending),
// ErrExpired (now ≥ ExpiresAt: the request becomes Expired and the vote is
// not counted; check r.State). A deny decides Denied; approvals decide
// Approved once Quorum distinct approvers agree (with DistinctRoles, each
// counted approver covers a different required role). Returns whether the
// request was decided by this vote.
func (r *Request) Cast(v Vote, now time.Time) (decided bool, err error) {
	if v.Tenants != nil && !slices.Contains(v.Tenants, r.Tenant) {
		// Outside the voter's tenants the request does not exist for
		// them: nothing about it is told, its state included.
		return false, fmt.Errorf("%w: no request %s among the voter's tenants", ErrNotFound, r.ID)
	}
	if r.State != Pending {
		return false, fmt.Errorf("%w: request is %s", ErrDecided, r.State)
	}
	if r.Expire(now) {
		return false, ErrExpired
	}
	if v.Approver == "" || !r.CanVote(v.Roles) {
		return false, ErrNotApprover
	}
	for _, prev := range r.Votes {
		if prev.Approver == v.Approver {
			return false, ErrAlreadyVoted
		}
	}
	if v.At.IsZero() {
		v.At = now
	}
	v.Roles = slices.Clone(v.Roles)
	r.Votes = append(r.Votes, v)
	if !v.Approve {
		r.decide(Denied, now, "denied by "+v.Approver+reasonSuffix(v.Reason))
		return true, nil
	}
	if r.approvals() >= max(r.Quorum, 1) {
		r.decide(Approved, now, "approved")
		return true, nil
	}
	return false, nil
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}

// approvals counts the approving votes that count towards the quorum: every
// approver once, and with DistinctRoles at most one approver per required
// role — the size of a maximum matching of approvers to the roles they
// hold, so that one person holding both secops and sre never satisfies both.
func (r *Request) approvals() int {
	var voters [][]string // roles each approving voter covers
	for _, v := range r.Votes {
		if v.Approve {
			voters = append(voters, covers(v.Roles, r.Roles))
		}
	}
	if !r.DistinctRoles {
		return len(voters)
	}
	owner := map[string]int{} // role → index of the voter it is matched to
	var assign func(i int, seen map[string]bool) bool
	assign = func(i int, seen map[string]bool) bool {
		for _, role := range voters[i] {
			if seen[role] {
				continue
			}
			seen[role] = true
			j, taken := owner[role]
			if !taken || assign(j, seen) {
				owner[role] = i
				return true
			}
		}
		return false
	}
	n := 0
	for i := range voters {
		if assign(i, map[string]bool{}) {
			n++
		}
	}
	return n
}

func (r *Request) decide(st State, now time.Time, reason string) {
	r.State = st
	t := now
	r.DecidedAt = &t
	r.Reason = reason
}

// Expire marks a pending request Expired when now ≥ ExpiresAt; reports
// whether it did.
func (r *Request) Expire(now time.Time) bool {
	if r.State != Pending || now.Before(r.ExpiresAt) {
		return false
	}
	r.decide(Expired, now, "expired")
	return true
}

// MarkStale decides a pending request st (Stale or Withdrawn) with reason.
// It returns ErrDecided when r is not pending.
func (r *Request) MarkStale(st State, reason string, now time.Time) error {
	if st != Stale && st != Withdrawn {
		return fmt.Errorf("approvals: cannot mark a request %s", st)
	}
	if r.State != Pending {
		return fmt.Errorf("%w: request is %s", ErrDecided, r.State)
	}
	r.decide(st, now, reason)
	return nil
}

// RefusalReason returns ReasonDenied, ReasonExpired or ReasonStale by State
// (Withdrawn → ReasonStale). It is empty for a pending or approved request.
func (r *Request) RefusalReason() string {
	switch r.State {
	case Denied:
		return ReasonDenied
	case Expired:
		return ReasonExpired
	case Stale, Withdrawn:
		return ReasonStale
	}
	return ""
}

// refusal is the REFUSED tool result a model receives in place of a call
// that was not approved.
type refusal struct {
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Call    string `json:"call"`
	Message string `json:"message"`
}

// Refusal is the REFUSED tool result JSON for a decided-not-approved
// request: {"status":"REFUSED","reason":...,"call":<name>,"message":...}.
// The message tells the model the call did not run and not to propose it
// again unchanged; it never carries the approvers' names.
func (r *Request) Refusal() []byte {
	reason := r.RefusalReason()
	if reason == "" {
		reason = ReasonStale
	}
	var msg string
	switch reason {
	case ReasonDenied:
		msg = fmt.Sprintf("The call to %s was not run: an approver denied it (gate %s).", r.Call.Name, r.Gate)
		if d := r.denyReason(); d != "" {
			msg += " Reason given: " + d + "."
		}
	case ReasonExpired:
		msg = fmt.Sprintf("The call to %s was not run: nobody approved it before the approval request expired (gate %s).", r.Call.Name, r.Gate)
	default:
		msg = fmt.Sprintf("The call to %s was not run: the conditions it was held under no longer hold (gate %s).", r.Call.Name, r.Gate)
	}
	msg += " Do not propose the same call again; choose another way or ask the user."
	b, err := json.Marshal(refusal{Status: "REFUSED", Reason: reason, Call: r.Call.Name, Message: msg})
	if err != nil { // strings only: cannot fail
		panic(err)
	}
	return b
}

func (r *Request) denyReason() string {
	for _, v := range r.Votes {
		if !v.Approve {
			return v.Reason
		}
	}
	return ""
}

// MaxPreview bounds a request's preview, in characters.
const MaxPreview = 500

// Preview is a human-readable one-line view of call, at most MaxPreview
// characters: the tool's name and its canonical arguments, invisible
// characters escaped (see Visible). A longer call keeps its head and its
// tail around a mark stating how many characters are elided; nothing is
// cut silently.
func Preview(c Call) string {
	return Excerpt(c.Name+" "+string(c.Input), MaxPreview, nil)
}
