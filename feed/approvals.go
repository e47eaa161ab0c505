package feed

import (
	"context"
	"encoding/json"

	"gatekeeper/approvals"
)

// Changes an approval event reports.
const (
	ChangeRequested = "requested"
	ChangeVote      = "vote"
	ChangeDecided   = "decided" // approved, denied, stale or withdrawn: the request's state says which
	ChangeExpired   = "expired"
)

// Approvals is an approvals store that publishes every request it opens,
// every vote it records and every decision, after the write succeeded.
type Approvals struct {
	approvals.Store
	pub publisher
}

var _ approvals.Store = (*Approvals)(nil)

// NewApprovals wraps s.
func NewApprovals(s approvals.Store, f *Feed) *Approvals {
	return &Approvals{Store: s, pub: f}
}

// CreateHold implements approvals.Store.
func (a *Approvals) CreateHold(ctx context.Context, h *approvals.Hold, reqs []*approvals.Request) (*approvals.Hold, error) {
	stored, err := a.Store.CreateHold(ctx, h, reqs)
	if err != nil {
		return stored, err
	}
	for _, r := range reqs {
		a.publish(ChangeRequested, r)
	}
	return stored, nil
}

// Update implements approvals.Store.
func (a *Approvals) Update(ctx context.Context, id string, fn func(*approvals.Request) error) (*approvals.Request, error) {
	var was approvals.State
	var votes int
	r, err := a.Store.Update(ctx, id, func(r *approvals.Request) error {
		was, votes = r.State, len(r.Votes)
		return fn(r)
	})
	if err != nil {
		return r, err
	}
	switch {
	case r.State == approvals.Expired && was != approvals.Expired:
		a.publish(ChangeExpired, r)
	case r.State != was:
		a.publish(ChangeDecided, r)
	case len(r.Votes) != votes:
		a.publish(ChangeVote, r)
	}
	return r, nil
}

// approvalData is an approval event's data.
type approvalData struct {
	Change  string             `json:"change"`
	Request *approvals.Request `json:"request"`
}

func (a *Approvals) publish(change string, r *approvals.Request) {
	data, err := json.Marshal(approvalData{Change: change, Request: r})
	if err != nil {
		return // a Request always encodes
	}
	at := r.CreatedAt
	switch {
	case change == ChangeRequested:
	case r.DecidedAt != nil:
		at = *r.DecidedAt
	case len(r.Votes) > 0:
		at = r.Votes[len(r.Votes)-1].At
	}
	a.pub.Publish(Event{Kind: KindApproval, At: at, Tenant: r.Tenant, Trajectory: r.Trajectory, Data: data})
}
