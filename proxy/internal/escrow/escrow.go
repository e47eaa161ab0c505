package escrow

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

// Signals wakes a wait on a record: the decision of one of its approval
// requests signals it.
type Signals interface {
	Wait(id string) (<-chan struct{}, func())
}

// Metrics is what the escrow reports: the held calls pending.
type Metrics interface {
	ApprovalPending(delta int64)
}

type noMetrics struct{}

func (noMetrics) ApprovalPending(int64) {}

// Config is what a Keeper is built with.
type Config struct {
	Service   *approvals.Service
	Gates     *approvals.Gates // nil: the Service's
	Approvals config.Approvals // keepalive, max_held_bytes
	Records   trajectory.Store
	Stages    meter.Thresholds
	// ToolDeadline is how long a released call may take (limits.tool_deadline).
	ToolDeadline time.Duration
	// ReadOnly is a tenant's read-only grant.
	ReadOnly func(tenant string) []string
	// Dialect is the streaming dialect of an API.
	Dialect func(streaming.API) streaming.Dialect
	Signals Signals
	// Closing is closed when gatekeeper shuts down: held waits end.
	Closing <-chan struct{}
	Clock   func() time.Time
	Log     *slog.Logger
	Metrics Metrics
}

// Keeper is gatekeeper's side of approval gates; nil when no gate is
// configured, so that tenants without gates pay nothing for it.
type Keeper struct {
	svc          *approvals.Service
	gates        *approvals.Gates
	store        approvals.Store
	records      trajectory.Store
	keepalive    time.Duration
	maxHeld      int64
	stages       meter.Thresholds
	toolDeadline time.Duration
	readOnly     func(string) []string
	dialect      func(streaming.API) streaming.Dialect
	signals      Signals
	closing      <-chan struct{}
	now          func() time.Time
	log          *slog.Logger
	metrics      Metrics
}

// New builds the escrow; nil when cfg has no approvals Service or no gate.
func New(cfg Config) *Keeper {
	if cfg.Service == nil {
		return nil
	}
	gates := cfg.Gates
	if gates == nil {
		gates = cfg.Service.Gates()
	}
	if gates.Empty() {
		return nil
	}
	e := &Keeper{svc: cfg.Service, gates: gates, store: cfg.Service.Store(), records: cfg.Records,
		keepalive: cfg.Approvals.Keepalive.Std(), maxHeld: cfg.Approvals.MaxHeldBytes, stages: cfg.Stages,
		toolDeadline: cfg.ToolDeadline, readOnly: cfg.ReadOnly, dialect: cfg.Dialect, signals: cfg.Signals,
		closing: cfg.Closing, now: cfg.Clock, log: cfg.Log, metrics: cfg.Metrics}
	if e.keepalive <= 0 {
		e.keepalive = config.DefaultKeepalive
	}
	if e.maxHeld <= 0 {
		e.maxHeld = config.DefaultMaxHeldBytes
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.readOnly == nil {
		e.readOnly = func(string) []string { return nil }
	}
	if e.metrics == nil {
		e.metrics = noMetrics{}
	}
	return e
}

// ForTenant reports whether some gate applies to tenant.
func (e *Keeper) ForTenant(tenant string) bool { return e.gates.ForTenant(tenant) }

// MaxHeld is the largest reply held (approvals.max_held_bytes).
func (e *Keeper) MaxHeld() int64 { return e.maxHeld }

// Errors of the escrow. Their texts, which reach the logs, are the ones
// they had in package proxy.
var (
	// errDelivered: the held turn's decided reply already went to a client.
	errDelivered = errors.New("proxy: held reply already delivered")
	// errServerClosing ends a held wait when gatekeeper shuts down: the
	// hold stays, and the agent's retry re-attaches on another replica.
	errServerClosing = errors.New("proxy: gatekeeper is shutting down")
)

// maxHolds bounds how many times one turn's content is held on one
// record.
const maxHolds = 9

// TurnKey is the held turn's key: SHA-256 over the API and the request's
// fields (its conversation and tools), and nothing that a retry may change
// (stream, stream_options, max_tokens, metadata). It is computed on the
// agent's body as it came, before any rewrite, so that a retry finds the
// hold whatever the budget stage is by then.
func TurnKey(api streaming.API, fields []string, body []byte) string {
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

// Gated is one client tool call of a reply that a gate matched.
type Gated struct {
	Call  streaming.ToolCall
	Gate  *approvals.Gate
	canon approvals.Call
	why   string
	// ambiguous: the call could be read two ways (its reply repeated a
	// member, or its input a key): nobody is asked, it is refused.
	ambiguous bool
}

// whyAmbiguous is the reason an ambiguous call is refused without asking.
const whyAmbiguous = "the reply names a member twice (or its input two keys equal but for case), " +
	"so gatekeeper and the agent could read different calls; such a call is never delivered"

// Gated returns the complete client calls of res that some gate matches,
// each judged on in (the turn's tenant, trajectory, stage, budget,
// provider and model) with the call's name and input; a call withheld
// from the reply is not judged. A call whose arguments are not canonical
// JSON is judged on its raw text, which no condition over tool.input can
// read: the gate that could match it holds it (fail closed).
//
// A call that reads two ways (res.Ambiguous: the reply repeated a member;
// or its input repeats a key, equal under case folding) is held by the
// first gate that could match its tool whatever the input: what a
// condition over its input says of one reading does not hold for the
// other. Its tool's name is the one the agent reads (the reply was read
// as rewritten into the agent's reading). Its request is refused at once
// (Open): approving it could not make the agent run what was shown.
func (e *Keeper) Gated(res *streaming.Result, in approvals.Input, withheld func(id string) bool) []Gated {
	g := e.gates
	var out []Gated
	for _, tc := range res.ToolCalls {
		// Every choice counts (Chat n>1): an unmatched choice must not
		// carry a gated call past the gate.
		if tc.Server || !tc.Complete || withheld(tc.ID) {
			continue
		}
		in := in
		in.ToolName, in.ToolInput = tc.Name, nil
		if !g.CouldMatch(in.Tenant, tc.Name, in) {
			continue
		}
		call, err := approvals.Canonical(tc.Name, tc.Arguments)
		ambiguous := res.Ambiguous || errors.Is(err, approvals.ErrRepeatedKey)
		if err == nil {
			in.ToolInput, err = call.Value()
		}
		if err != nil {
			raw, _ := json.Marshal(string(tc.Arguments)) // a string always marshals
			call = approvals.Call{Name: tc.Name, Input: raw}
			in.ToolInput = string(tc.Arguments)
		}
		if ambiguous {
			if gate := g.FirstCouldMatch(in.Tenant, tc.Name, in); gate != nil {
				out = append(out, Gated{Call: tc, Gate: gate, canon: call, why: whyAmbiguous, ambiguous: true})
			}
			continue
		}
		gate, why := g.Match(in)
		if gate == nil {
			continue
		}
		out = append(out, Gated{Call: tc, Gate: gate, canon: call, why: why})
	}
	return out
}

// Turn is what a hold keeps of the turn whose reply it holds.
type Turn struct {
	Trajectory    string // the thread record
	Root          string // the root trajectory
	Thread        string // the thread key
	Tenant        string
	Key           string // TurnKey
	API           streaming.API
	Provider      string
	Model         string
	Request       []byte // the body sent to the provider
	Continuations int    // continuations before this reply
	Stage         meter.Stage
	BudgetUsed    float64
	Grant         []string // the restrict stage's read-only grant
	Log           *slog.Logger
}

// Open stores the held reply with one approval request per gated call,
// then has the turn recorded (recorded, with the first request's id):
// charged, its calls pending, the record AWAITING_APPROVAL. A gated call
// proposed again after an identical one was refused in this trajectory,
// before that refusal's request expired, gets a request already decided
// the same way: nobody is asked again.
func (e *Keeper) Open(ctx context.Context, t Turn, res *streaming.Result, rep Reply, gated []Gated, recorded func(approvalID string)) (*approvals.Hold, error) {
	now := e.now()
	reqs := make([]*approvals.Request, len(gated))
	asked := false
	for i, g := range gated {
		r := g.Gate.Request(approvals.NewID("apr_"), g.canon, g.why, now)
		r.CallID, r.Thread = g.Call.ID, t.Thread
		r.Observed = approvals.Observed{State: string(trajectory.AwaitingApproval), Stage: string(t.Stage), BudgetUsed: t.BudgetUsed}
		if t.Stage == meter.Restrict {
			r.Observed.Grant = t.Grant
		}
		if g.ambiguous {
			r.State, r.Reason, r.DecidedAt = approvals.Withdrawn, whyAmbiguous, &now
			r.Votes = nil
		} else if prev, err := e.store.Recent(ctx, t.Trajectory, r.Digest); err == nil && refusedBefore(prev, now) {
			r.State, r.Reason, r.DecidedAt = prev.State, "the same call was refused earlier ("+prev.ID+")", &now
			r.Votes = nil
		} else {
			asked = true
		}
		reqs[i] = r
	}
	h, err := e.storeHold(ctx, t, res, rep, reqs, asked, now)
	if err != nil {
		return nil, err
	}
	e.metrics.ApprovalPending(int64(len(reqs)))
	recorded(h.Requests[0])
	rec, err := e.records.Get(ctx, t.Trajectory)
	if err == nil && (rec.State != trajectory.AwaitingApproval || rec.Pending.ApprovalID != h.Requests[0]) {
		err = fmt.Errorf("record is %s after the held turn was recorded", rec.State)
	}
	if err != nil {
		// The turn could not be recorded as held (the store failed, or an
		// operator stopped the run meanwhile): nothing will be delivered.
		e.withdraw(ctx, h, "the held turn could not be recorded: "+err.Error(), t.Log)
		return nil, err
	}
	t.Log.LogAttrs(ctx, slog.LevelInfo, "tool call held for approval", slog.String("hold", h.ID),
		slog.String("approval_id", h.Requests[0]), slog.Int("requests", len(reqs)))
	return h, nil
}

// storeHold stores the turn's hold as the latest of its turn on its
// record: the first, or the next after a hold of the same turn that was
// decided (the same conversation sent again, the model asked anew, or the
// continuation after a refusal), which it names as its Previous. A hold
// of the same turn still undecided (another replica's) is ErrExists.
func (e *Keeper) storeHold(ctx context.Context, t Turn, res *streaming.Result, rep Reply, reqs []*approvals.Request, asked bool, now time.Time) (*approvals.Hold, error) {
	var prev *approvals.Hold
	for {
		h, err := e.createHold(ctx, newHold(t, res, rep, prev, now), reqs, asked)
		if !errors.Is(err, approvals.ErrExists) {
			return h, err
		}
		if h.State == approvals.Holding && !h.Delivered || h.Generation >= maxHolds {
			return nil, fmt.Errorf("turn %s held %d times on record %s, the latest %s: %w", t.Key, h.Generation, t.Trajectory, h.State, err)
		}
		prev = h
	}
}

// newHold is the hold of turn t's reply, following prev (nil for the
// turn's first).
func newHold(t Turn, res *streaming.Result, rep Reply, prev *approvals.Hold, now time.Time) *approvals.Hold {
	var ids []string
	for _, tc := range res.ClientToolCalls() {
		ids = append(ids, tc.ID)
	}
	h := &approvals.Hold{ID: approvals.NewID("hold_"), Trajectory: t.Trajectory, Root: t.Root, Tenant: t.Tenant,
		Key: t.Key, Generation: 1, API: string(t.API), Streamed: rep.Streamed(), Provider: t.Provider, Model: t.Model,
		Request: t.Request, Reply: rep.Body, Calls: ids, State: approvals.Holding, Continuations: t.Continuations, CreatedAt: now}
	if prev != nil {
		h.Generation, h.Previous = prev.Generation+1, prev.ID
	}
	return h
}

// createHold stores h with reqs: through the Service, which announces
// them, when someone is asked; straight to the store when every call is
// refused already, so that nobody is announced anything. On ErrExists it
// returns the existing hold.
func (e *Keeper) createHold(ctx context.Context, h *approvals.Hold, reqs []*approvals.Request, asked bool) (*approvals.Hold, error) {
	if asked {
		return e.svc.Open(ctx, h, reqs)
	}
	h.Requests = h.Requests[:0]
	for _, r := range reqs {
		r.Hold, r.Trajectory, r.Root, r.Tenant = h.ID, h.Trajectory, h.Root, h.Tenant
		h.Requests = append(h.Requests, r.ID)
		h.ExpiresAt = later(h.ExpiresAt, r.ExpiresAt)
	}
	return e.store.CreateHold(ctx, h, reqs)
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
func (e *Keeper) withdraw(ctx context.Context, h *approvals.Hold, reason string, log *slog.Logger) {
	for _, id := range h.Requests {
		if _, err := e.svc.Decide(ctx, id, approvals.Withdrawn, reason); err != nil && !errors.Is(err, approvals.ErrDecided) {
			log.LogAttrs(ctx, slog.LevelWarn, "withdrawing an approval request failed", slog.String("approval_id", id), slog.String("error", err.Error()))
		}
	}
	if _, err := e.store.UpdateHold(ctx, h.ID, func(h *approvals.Hold) error {
		h.State = approvals.Refused
		return nil
	}); err != nil {
		log.LogAttrs(ctx, slog.LevelWarn, "closing a hold failed", slog.String("hold", h.ID), slog.String("error", err.Error()))
	}
}

// Find looks, for a request admission found on record id holding a reply
// for approval (or having just released one), for the held turn of key.
// It returns the hold the request re-attaches to; nil and no error when
// the record holds no turn of this key (admission goes on as usual); an
// *Answer when the request is refused because the turn's reply was
// delivered already; the approvals store's error, wrapped, when it could
// not be read (the store is unavailable: no hold is at stake, and
// admission answers as for any store outage). opening: the record is calling
// the model, and only a hold still undecided and undelivered (the call in
// flight's own) is this turn's: an earlier one of the same conversation
// is not.
func (e *Keeper) Find(ctx context.Context, id, key string, opening bool) (*approvals.Hold, error) {
	h, err := e.store.FindHold(ctx, id, key)
	if err == nil && h.Generation == 0 {
		h, err = latestHold(ctx, e.store, h, maxHolds)
	}
	switch {
	case errors.Is(err, approvals.ErrNotFound),
		err == nil && opening && (h.Delivered || h.State != approvals.Holding):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("looking for the held turn of record %s: %w", id, err)
	case h.Delivered:
		return nil, Delivered()
	}
	return h, nil
}
