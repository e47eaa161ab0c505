package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tidwall/gjson"

	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// Escrow: a reply whose client tool call some gate matches is held here,
// undelivered, until its approval requests are decided. The reply is kept
// whole in an approvals.Hold keyed by the turn's content, so that a retry
// of the same turn, on any replica, re-attaches to it instead of calling
// the model again.
//
// The pieces: escrow.go (matching, opening a hold), escrow_await.go (the
// one wait for a decision, its ends and the agent's answer to each),
// escrow_settle.go (release or refusal), escrow_continue.go (the model
// call after a refusal), escrow_render.go (the reply's forms, the decided
// reply as a client asked for it), escrow_stream.go (the original streamed
// turn), escrow_retry.go (a retry, and the non-streamed turn),
// escrow_keepalive.go (what a held stream sends while it waits),
// escrow_legacy.go (holds stored before their chain was recorded).

// escrow is the proxy's side of approval gates; nil when no gate is
// configured, so that tenants without gates pay nothing for it.
type escrow struct {
	svc       *approvals.Service
	gates     *approvals.Gates
	store     approvals.Store
	keepalive time.Duration
	maxHeld   int64
}

func newEscrow(svc *approvals.Service, gates *approvals.Gates, cfg config.Approvals) *escrow {
	if svc == nil {
		return nil
	}
	if gates == nil {
		gates = svc.Gates()
	}
	if gates.Empty() {
		return nil
	}
	e := &escrow{svc: svc, gates: gates, store: svc.Store(), keepalive: cfg.Keepalive.Std(), maxHeld: cfg.MaxHeldBytes}
	if e.keepalive <= 0 {
		e.keepalive = config.DefaultKeepalive
	}
	if e.maxHeld <= 0 {
		e.maxHeld = config.DefaultMaxHeldBytes
	}
	return e
}

// Errors of the escrow.
var (
	// errAwaiting: admission found the thread record holding a reply for
	// approval (or just past one); the request may be a retry of that turn.
	errAwaiting = errors.New("proxy: thread record holds a reply for approval")
	// errHoldOpening: admission found the thread record calling the model;
	// the call may have stored its hold already (openHold stores it before
	// it records the turn), and the request may be a retry of that turn.
	errHoldOpening = fmt.Errorf("%w, or is opening one", errAwaiting)
	// errDelivered: the held turn's decided reply already went to a client.
	errDelivered = errors.New("proxy: held reply already delivered")
	// errHeldTooLarge: the reply grew past approvals.max_held_bytes.
	errHeldTooLarge = errors.New("proxy: reply too large to hold for approval")
)

// turnKey is the held turn's key: SHA-256 over the request's conversation
// and tools, and nothing that a retry may change (stream, stream_options,
// max_tokens, metadata). It is computed on the agent's body as it came,
// before any rewrite, so that a retry finds the hold whatever the budget
// stage is by then.
func turnKey(api streaming.API, body []byte) string {
	fields := dialectOf(api).turnFields
	h := sha256.New()
	h.Write([]byte(api))
	for _, f := range gjson.GetManyBytes(body, fields...) {
		// Each field is written with its length, so that no two different
		// requests hash the same bytes.
		fmt.Fprintf(h, "\x00%d:", len(f.Raw))
		h.Write([]byte(f.Raw))
	}
	return "turn_" + hex.EncodeToString(h.Sum(nil))
}

// gatedCall is one client tool call of a reply that a gate matched.
type gatedCall struct {
	tc   streaming.ToolCall
	call approvals.Call
	gate *approvals.Gate
	why  string
}

// gatedCalls returns the complete client calls of res that some gate
// matches. A call whose arguments are not canonical JSON is judged on its
// raw text, which no condition over tool.input can read: the gate that
// could match it holds it (fail closed).
func (t *turn) gatedCalls(res *streaming.Result) []gatedCall {
	g := t.s.esc.gates
	var out []gatedCall
	for _, tc := range res.ToolCalls {
		// Every choice counts (Chat n>1): an unmatched choice must not
		// carry a gated call past the gate.
		if tc.Server || !tc.Complete || t.withheld(tc.ID) {
			continue
		}
		in := approvals.Input{ToolName: tc.Name, Tenant: t.req.tenant.Name, Trajectory: t.recID,
			Stage: string(t.adm.Decision.Stage), BudgetUsed: t.adm.Decision.Rho, Provider: t.req.up.cfg.Name, Model: t.pr.Model}
		if !g.CouldMatch(in.Tenant, tc.Name, in) {
			continue
		}
		call, err := approvals.Canonical(tc.Name, tc.Arguments)
		if err == nil {
			in.ToolInput, err = call.Value()
		}
		if err != nil {
			raw, _ := json.Marshal(string(tc.Arguments)) // a string always marshals
			call = approvals.Call{Name: tc.Name, Input: raw}
			in.ToolInput = string(tc.Arguments)
		}
		gate, why := g.Match(in)
		if gate == nil {
			continue
		}
		out = append(out, gatedCall{tc: tc, call: call, gate: gate, why: why})
	}
	return out
}

// openHold stores the held reply with one approval request per gated call,
// then records the turn: charged, its calls pending, the record
// AWAITING_APPROVAL. A gated call proposed again after an identical one
// was refused in this trajectory, before that refusal's request expired,
// gets a request already decided the same way: nobody is asked again.
func (t *turn) openHold(ctx context.Context, res *streaming.Result, rep reply, gated []gatedCall, o outcome) (*approvals.Hold, error) {
	s, esc := t.s, t.s.esc
	now := s.now()
	reqs := make([]*approvals.Request, len(gated))
	asked := false
	for i, g := range gated {
		r := g.gate.Request(approvals.NewID("apr_"), g.call, g.why, now)
		r.CallID, r.Thread = g.tc.ID, t.thread
		r.Observed = approvals.Observed{State: string(trajectory.AwaitingApproval), Stage: string(t.adm.Decision.Stage),
			BudgetUsed: t.adm.Decision.Rho}
		if t.adm.Decision.Stage == meter.Restrict {
			r.Observed.Grant = t.req.tenant.ReadOnlyTools
		}
		if prev, err := esc.store.Recent(ctx, t.recID, r.Digest); err == nil && refusedBefore(prev, now) {
			r.State, r.Reason, r.DecidedAt = prev.State, "the same call was refused earlier ("+prev.ID+")", &now
			r.Votes = nil
		} else {
			asked = true
		}
		reqs[i] = r
	}
	h, err := t.storeHold(ctx, res, rep, reqs, asked, now)
	if err != nil {
		return nil, err
	}
	s.tel.ApprovalPending(int64(len(reqs)))
	t.holdOpened(o, h.Requests[0])
	rec, err := s.store.Get(ctx, t.recID)
	if err == nil && (rec.State != trajectory.AwaitingApproval || rec.Pending.ApprovalID != h.Requests[0]) {
		err = fmt.Errorf("record is %s after the held turn was recorded", rec.State)
	}
	if err != nil {
		// The turn could not be recorded as held (the store failed, or an
		// operator stopped the run meanwhile): nothing will be delivered.
		t.withdraw(ctx, h, "the held turn could not be recorded: "+err.Error())
		return nil, err
	}
	t.log.LogAttrs(ctx, slog.LevelInfo, "tool call held for approval", slog.String("hold", h.ID),
		slog.String("approval_id", h.Requests[0]), slog.Int("requests", len(reqs)))
	return h, nil
}

// maxHolds bounds how many times one turn's content is held on one
// record.
const maxHolds = 9

// storeHold stores the turn's hold as the latest of its turn on its
// record: the first, or the next after a hold of the same turn that was
// decided (the same conversation sent again, the model asked anew, or the
// continuation after a refusal), which it names as its Previous. A hold
// of the same turn still undecided (another replica's) is ErrExists.
func (t *turn) storeHold(ctx context.Context, res *streaming.Result, rep reply, reqs []*approvals.Request, asked bool, now time.Time) (*approvals.Hold, error) {
	var prev *approvals.Hold
	for {
		h, err := t.createHold(ctx, t.newHold(res, rep, prev, now), reqs, asked)
		if !errors.Is(err, approvals.ErrExists) {
			return h, err
		}
		if h.State == approvals.Holding && !h.Delivered || h.Generation >= maxHolds {
			return nil, fmt.Errorf("turn %s held %d times on record %s, the latest %s: %w", t.key, h.Generation, t.recID, h.State, err)
		}
		prev = h
	}
}

// newHold is the hold of this turn's reply, following prev (nil for the
// turn's first).
func (t *turn) newHold(res *streaming.Result, rep reply, prev *approvals.Hold, now time.Time) *approvals.Hold {
	var ids []string
	for _, tc := range res.ClientToolCalls() {
		ids = append(ids, tc.ID)
	}
	h := &approvals.Hold{ID: approvals.NewID("hold_"), Trajectory: t.recID, Root: t.root, Tenant: t.req.tenant.Name,
		Key: t.key, Generation: 1, API: string(t.req.api), Streamed: rep.streamed(), Provider: t.req.up.cfg.Name, Model: t.pr.Model,
		Request: t.body, Reply: rep.body, Calls: ids, State: approvals.Holding, Continuations: t.conts, CreatedAt: now}
	if prev != nil {
		h.Generation, h.Previous = prev.Generation+1, prev.ID
	}
	return h
}

// createHold stores h with reqs: through the Service, which announces
// them, when someone is asked; straight to the store when every call is
// refused already, so that nobody is announced anything. On ErrExists it
// returns the existing hold.
func (t *turn) createHold(ctx context.Context, h *approvals.Hold, reqs []*approvals.Request, asked bool) (*approvals.Hold, error) {
	if asked {
		return t.s.esc.svc.Open(ctx, h, reqs)
	}
	h.Requests = h.Requests[:0]
	for _, r := range reqs {
		r.Hold, r.Trajectory, r.Root, r.Tenant = h.ID, h.Trajectory, h.Root, h.Tenant
		h.Requests = append(h.Requests, r.ID)
		h.ExpiresAt = later(h.ExpiresAt, r.ExpiresAt)
	}
	return t.s.esc.store.CreateHold(ctx, h, reqs)
}

// refusedBefore reports whether prev refuses the same call again at now.
func refusedBefore(prev *approvals.Request, now time.Time) bool {
	switch prev.State {
	case approvals.Denied, approvals.Expired, approvals.Stale:
		return now.Before(prev.ExpiresAt)
	}
	return false
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// withdraw marks the hold's pending requests withdrawn and the hold
// refused: nobody needs to decide a turn that will not be delivered.
func (t *turn) withdraw(ctx context.Context, h *approvals.Hold, reason string) {
	t.s.withdrawHold(ctx, h, reason, t.log)
}

func (s *Server) withdrawHold(ctx context.Context, h *approvals.Hold, reason string, log *slog.Logger) {
	for _, id := range h.Requests {
		if _, err := s.esc.svc.Decide(ctx, id, approvals.Withdrawn, reason); err != nil && !errors.Is(err, approvals.ErrDecided) {
			log.LogAttrs(ctx, slog.LevelWarn, "withdrawing an approval request failed", slog.String("approval_id", id), slog.String("error", err.Error()))
		}
	}
	if _, err := s.esc.store.UpdateHold(ctx, h.ID, func(h *approvals.Hold) error {
		h.State = approvals.Refused
		return nil
	}); err != nil {
		log.LogAttrs(ctx, slog.LevelWarn, "closing a hold failed", slog.String("hold", h.ID), slog.String("error", err.Error()))
	}
}
