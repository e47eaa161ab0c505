package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"gatekeeper/approvals"
	"gatekeeper/trajectory"
)

// approvalService is what the admin API needs of the approvals Service.
type approvalService interface {
	Vote(ctx context.Context, id string, v approvals.Vote) (*approvals.Request, error)
	Decide(ctx context.Context, id string, st approvals.State, reason string) (*approvals.Request, error)
	Store() approvals.Store
}

var _ approvalService = (*approvals.Service)(nil)

// maxVoteBodySize bounds the body of an approve or deny call.
const maxVoteBodySize = 16 << 10

// WithApprovals serves the approval requests of s. Without it the
// approvals routes answer 404 "approvals are not configured".
func WithApprovals(s *approvals.Service) Option {
	return func(a *API) {
		if s != nil {
			a.approvals = s
		}
	}
}

func (a *API) approvalRoutes(r chi.Router) {
	// Reading needs any valid token; voting needs a role of the request's
	// gate, which the Service checks against the token's roles.
	r.Get("/approvals", a.handle(a.listApprovals, ""))
	r.Get("/approvals/{id}", a.handle(a.showApproval, ""))
	r.Post("/approvals/{id}/{verb}", a.handle(a.voteApproval, ""))
}

var errApprovalsOff = &Error{Code: http.StatusNotFound, Type: "not_found_error", Msg: "approvals are not configured"}

func (a *API) listApprovals(w http.ResponseWriter, r *http.Request, c caller) error {
	if a.approvals == nil {
		return errApprovalsOff
	}
	q := r.URL.Query()
	f := approvals.Filter{State: approvals.State(q.Get("state")), Trajectory: q.Get("trajectory"), Root: q.Get("root"),
		Tenants: c.tenants, Limit: defaultListLimit}
	if f.State != "" && !f.State.Valid() {
		return badRequest("unknown state " + strconv.Quote(q.Get("state")) + " (want pending, approved, denied, expired, stale or withdrawn)")
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > approvals.MaxListLimit {
			return badRequest(fmt.Sprintf("limit must be 1..%d", approvals.MaxListLimit))
		}
		f.Limit = n
	}
	reqs, err := a.approvals.Store().List(r.Context(), f)
	if err != nil {
		return approvalErr(err)
	}
	if reqs == nil {
		reqs = []*approvals.Request{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"approvals": reqs})
	return nil
}

func (a *API) showApproval(w http.ResponseWriter, r *http.Request, c caller) error {
	if a.approvals == nil {
		return errApprovalsOff
	}
	req, err := a.approval(r.Context(), c, chi.URLParam(r, "id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, req)
	return nil
}

// approval reads the request id, absent (404) when it is another tenant's
// than the caller's.
func (a *API) approval(ctx context.Context, c caller, id string) (*approvals.Request, error) {
	req, err := a.approvals.Store().Get(ctx, id)
	if err == nil && !c.sees(req.Tenant) {
		err = fmt.Errorf("%w: not among the caller's tenants", approvals.ErrNotFound)
	}
	if err != nil {
		return nil, approvalErr(err)
	}
	return req, nil
}

// voteBody is the body of POST /admin/v1/approvals/{id}/{approve,deny}.
type voteBody struct {
	Reason string `json:"reason"`
}

func (a *API) voteApproval(w http.ResponseWriter, r *http.Request, c caller) error {
	if a.approvals == nil {
		return errApprovalsOff
	}
	var approve bool
	switch verb := chi.URLParam(r, "verb"); verb {
	case "approve":
		approve = true
	case "deny":
	default:
		return &Error{Code: http.StatusNotFound, Type: "not_found_error", Msg: "unknown verb " + strconv.Quote(verb) + " (want approve or deny)"}
	}
	var body voteBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxVoteBodySize))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil && !errors.Is(err, io.EOF) {
		return badRequest("body must be empty or a JSON object {reason?}: " + err.Error())
	}
	// The token's tenants first: a request outside them is absent, and
	// the vote's answer must not tell more of it.
	if _, err := a.approval(r.Context(), c, chi.URLParam(r, "id")); err != nil {
		return err
	}
	// One identity across channels: the person the token belongs to,
	// within the person's tenants.
	dir := approvals.NewDirectory(a.config().Approvals)
	who := dir.Admin(c.name, c.roles)
	if c.session != nil {
		who = dir.SignIn(c.session.Person, c.roles)
	}
	v := approvals.Vote{Approver: who.Name, Roles: who.Roles, Approve: approve, Reason: body.Reason, Via: approvals.ViaAdmin,
		Credential: who.Credential, Tenants: who.Tenants}
	req, err := a.approvals.Vote(r.Context(), chi.URLParam(r, "id"), v)
	if err != nil {
		return approvalErr(err)
	}
	writeJSON(w, http.StatusOK, req)
	return nil
}

// approvalErr maps the approvals errors to what the caller can act on;
// anything else is the store's failure, logged by writeErr.
func approvalErr(err error) error {
	switch {
	case errors.Is(err, approvals.ErrNotFound):
		return &Error{Code: http.StatusNotFound, Type: "not_found_error", Msg: "no such approval request", Err: err}
	case errors.Is(err, approvals.ErrNotApprover):
		return &Error{Code: http.StatusForbidden, Type: "permission_error", Msg: "this approver (the token, or the person approvals.people lists it under) holds none of the roles the request's gate names", Err: err}
	case errors.Is(err, approvals.ErrAlreadyVoted):
		return &Error{Code: http.StatusConflict, Type: "conflict_error", Msg: "this approver has already voted on the request, through this or another channel", Err: err}
	case errors.Is(err, approvals.ErrExpired):
		return &Error{Code: http.StatusConflict, Type: "conflict_error", Msg: "the request expired before this vote; silence is denial", Err: err}
	case errors.Is(err, approvals.ErrDecided):
		return &Error{Code: http.StatusConflict, Type: "conflict_error", Msg: "the request is already decided", Err: err}
	}
	return err
}

// withdrawPending withdraws the pending approval requests of records an
// operator has just ended (cancel, kill, finish), so that approvers are
// not asked about a call that can no longer be delivered and their
// channels show it at once, whether or not a client is still attached to
// the held turn. Failures are logged: the record's own state already
// keeps the call from being released (the release re-checks it).
func (a *API) withdrawPending(ctx context.Context, ids []string, kind trajectory.ControlKind, by string) {
	if a.approvals == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	reason := fmt.Sprintf("trajectory ended by %s (%s)", by, kind)
	for _, id := range ids {
		reqs, err := a.approvals.Store().List(ctx, approvals.Filter{Trajectory: id, State: approvals.Pending, Limit: maxWithdraw})
		if err != nil {
			a.log.LogAttrs(ctx, slog.LevelWarn, "pending approvals of an ended trajectory not listed",
				slog.String("trajectory", id), slog.String("error", err.Error()))
			continue
		}
		for _, r := range reqs {
			if _, err := a.approvals.Decide(ctx, r.ID, approvals.Withdrawn, reason); err != nil && !errors.Is(err, approvals.ErrDecided) {
				a.log.LogAttrs(ctx, slog.LevelWarn, "approval request of an ended trajectory not withdrawn",
					slog.String("trajectory", id), slog.String("approval_id", r.ID), slog.String("error", err.Error()))
			}
		}
	}
}

// maxWithdraw bounds the requests withdrawn per ended record; a record
// has at most approvals.max_pending of them.
const maxWithdraw = 1000
