package escrow

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"gatekeeper/approvals"
	"gatekeeper/streaming"
)

// holdRequests reads h's requests and whether all are decided.
func holdRequests(ctx context.Context, st approvals.Store, h *approvals.Hold) ([]*approvals.Request, bool, error) {
	reqs := make([]*approvals.Request, 0, len(h.Requests))
	done := true
	for _, id := range h.Requests {
		r, err := st.Get(ctx, id)
		if err != nil {
			return nil, false, err
		}
		done = done && r.Decided()
		reqs = append(reqs, r)
	}
	return reqs, done, nil
}

// previousHold is the hold h follows on its turn.
func previousHold(ctx context.Context, st approvals.Store, h *approvals.Hold) (*approvals.Hold, error) {
	if h.Generation == 0 {
		return legacyPrevious(ctx, st, h)
	}
	if h.Previous == "" {
		return nil, fmt.Errorf("hold %s of a continuation has no earlier hold", h.ID)
	}
	return st.GetHold(ctx, h.Previous)
}

// staleError is a release re-check that failed: the approval no longer
// covers the world as it is.
type staleError struct{ Why string }

func (e *staleError) Error() string { return "holds: approval is stale: " + e.Why }

// checkApproved re-checks approved requests against the held reply res:
// each approved call is in it, is the call approved (its digest), and was
// approved before its expiry; else a *staleError.
func checkApproved(reqs []*approvals.Request, res *streaming.Result) error {
	for _, r := range reqs {
		i := slices.IndexFunc(res.ToolCalls, func(tc streaming.ToolCall) bool { return tc.ID == r.CallID })
		if i < 0 {
			return &staleError{Why: "the approved call is not in the held reply"}
		}
		call, err := approvals.Canonical(res.ToolCalls[i].Name, res.ToolCalls[i].Arguments)
		if err != nil || call.Digest() != r.Digest {
			return &staleError{Why: "the held call is not the one approved"}
		}
		if r.DecidedAt == nil || !r.DecidedAt.Before(r.ExpiresAt) {
			return &staleError{Why: "the approval came after its expiry"}
		}
	}
	return nil
}

// markStale turns approved (or still pending) requests whose release
// re-check failed into stale ones, decided at now, and returns the
// requests as they now are; one the store could not update is returned
// stale all the same, and logged.
func markStale(ctx context.Context, st approvals.Store, reqs []*approvals.Request, why string, now time.Time, log *slog.Logger) []*approvals.Request {
	out := make([]*approvals.Request, len(reqs))
	for i, r := range reqs {
		nr, err := st.Update(ctx, r.ID, func(r *approvals.Request) error {
			if r.State == approvals.Approved || r.State == approvals.Pending {
				r.State, r.Reason, r.DecidedAt = approvals.Stale, why, &now
			}
			return nil
		})
		if err != nil {
			log.LogAttrs(ctx, slog.LevelWarn, "marking an approval stale failed", slog.String("approval_id", r.ID), slog.String("error", err.Error()))
			nr = r.Clone()
			nr.State, nr.Reason = approvals.Stale, why
		}
		out[i] = nr
	}
	return out
}

// closeHold records the hold's end in state st; a failure is logged.
func closeHold(ctx context.Context, st approvals.Store, h *approvals.Hold, state approvals.HoldState, log *slog.Logger) {
	if _, err := st.UpdateHold(ctx, h.ID, func(h *approvals.Hold) error {
		h.State = state
		return nil
	}); err != nil {
		log.LogAttrs(ctx, slog.LevelWarn, "closing a hold failed", slog.String("hold", h.ID), slog.String("error", err.Error()))
	}
}

// refusalText replaces a refused call in the reply (on_refusal end_turn).
func refusalText(r *approvals.Request) string {
	why := map[approvals.State]string{approvals.Denied: "an approver denied it", approvals.Expired: "no approver decided before it expired",
		approvals.Stale: "its approval no longer held when it was to be released", approvals.Withdrawn: "it was withdrawn"}[r.State]
	if r.Reason != "" && r.State != approvals.Expired {
		why += " (" + r.Reason + ")"
	}
	return fmt.Sprintf("[gatekeeper] The call to %s was refused and was not run: %s. Gate: %s.", r.Call.Name, why, r.Gate)
}

// notRun is the tool result for a call of a reply that was not run
// because another call of the reply (refused, nil when unknown) was
// refused.
func notRun(name string, refused *approvals.Request) []byte {
	reason := approvals.ReasonStale
	if refused != nil {
		reason = refused.RefusalReason()
	}
	b, _ := json.Marshal(map[string]string{"status": "REFUSED", "reason": reason, "call": name, // strings always marshal
		"message": "This call was not run: another tool call of the same reply was refused approval."})
	return b
}
