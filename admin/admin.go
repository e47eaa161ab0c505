// Package admin serves gatekeeper's control API for operators and
// approvers: reading trajectory records and their event logs, creating
// trajectories ahead of time with budgets, changing a live run's budget,
// and the operators' control requests (pause, resume, cancel, kill,
// finish, interrupt), which it records on a trajectory and its whole
// subtree and signals to every replica; marking a run's outcome, and the
// cost-vs-success report of the runs so marked. Every call needs a bearer
// token from admin.tokens (tokens are compared in constant time), but for
// the API's own contract: its OpenAPI document and the event stream's
// JSON Schema (openapi.go). A token scoped to tenants sees and acts on
// theirs alone: another tenant's objects are absent to it.
package admin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/config"
	"gatekeeper/internal/conncap"
	"gatekeeper/spendlimit"
	"gatekeeper/trajectory"
)

// Roles a token can hold.
const (
	RoleOperator = "operator"
	RoleApprover = "approver"
)

// Limits on what one call returns.
const (
	defaultListLimit  = 100
	maxListLimit      = 1000
	maxEventsLimit    = 1000
	maxCreateBodySize = 64 << 10
	maxPersonQuery    = 1024
)

// Store is what the admin API needs of the trajectory store.
type Store interface {
	Create(ctx context.Context, rec *trajectory.Record, evs ...trajectory.Event) error
	CreateChild(ctx context.Context, rec *trajectory.Record, max int, evs ...trajectory.Event) error
	Get(ctx context.Context, id string) (*trajectory.Record, error)
	List(ctx context.Context, f trajectory.Filter) ([]*trajectory.Record, error)
	Events(ctx context.Context, id string, afterSeq int64, limit int) ([]trajectory.Event, error)
	Update(ctx context.Context, id string, fn func(*trajectory.Record) ([]trajectory.Event, error)) (*trajectory.Record, error)
}

// Publisher tells the replicas of a control request (see
// trajectory.Signals).
type Publisher interface {
	Publish(ctx context.Context, s trajectory.Signal) error
}

// Option configures an API beyond what New requires.
type Option func(*API)

// WithSignals makes the API publish a trajectory.Signal for every record a
// control request changed, so that the replica serving its call in flight
// acts at once. Without it (or with nil) nothing is published and replicas
// act on the pending control when the call ends.
func WithSignals(p Publisher) Option {
	return func(a *API) { a.signals = p }
}

// StateObserver hears of every state change the API makes (telemetry's
// trajectories-by-state gauge).
type StateObserver interface {
	StateChanged(tenant, from, to string)
}

// WithStateObserver reports the transitions of control requests to o.
func WithStateObserver(o StateObserver) Option {
	return func(a *API) { a.states = o }
}

// API is the admin handler.
type API struct {
	store  Store
	cfg    atomic.Pointer[config.Config] // SetConfig swaps it; admin.tokens stay New's
	tokens []token
	log    *slog.Logger
	now    func() time.Time
	// signals is nil when control requests are not published.
	signals Publisher
	states  StateObserver // nil: none
	// approvals is nil when gates are not configured (see WithApprovals).
	approvals approvalService
	// stream and keys are nil without WithStream.
	stream EventStream
	keys   KeysView
	ledger TenantLedger // nil without WithLedger
	// reloader is nil without WithReloader.
	reloader Reloader
	// spendLimits is nil without WithSpendLimits.
	spendLimits spendlimit.Store
	// sessions is nil without WithSessions: bearer tokens only.
	sessions Sessions
}

type token struct {
	hash    [32]byte
	name    string
	roles   []string
	tenants []string // nil: every tenant
}

// New builds the admin API.
func New(cfg *config.Config, store Store, log *slog.Logger, now func() time.Time, opts ...Option) *API {
	a := &API{store: store, log: log, now: now}
	a.cfg.Store(cfg)
	for _, o := range opts {
		o(a)
	}
	for _, t := range cfg.Admin.Tokens {
		a.tokens = append(a.tokens, token{hash: sha256.Sum256([]byte(t.Token)), name: t.Name, roles: t.Roles, tenants: t.Tenants})
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	return a
}

// config is the config the API answers with: New's, or SetConfig's.
func (a *API) config() *config.Config { return a.cfg.Load() }

// SetConfig makes cfg, a reloaded config, the one the API reads tenants,
// budget stages, providers and approvers from; a request already begun
// keeps what it read. The admin tokens stay New's: a reload does not
// change them.
func (a *API) SetConfig(cfg *config.Config) { a.cfg.Store(cfg) }

// Routes mounts the admin API under /admin/v1.
func (a *API) Routes(r chi.Router) {
	r.Route("/admin/v1", func(r chi.Router) {
		r.Get("/trajectories", a.handle(a.list, ""))
		r.Post("/trajectories", a.handle(a.create, RoleOperator))
		// Child ids hold a slash ("run-42/3f9a..."), so the rest of the
		// path is the id, with /events at its end for the log.
		r.Get("/trajectories/*", a.handle(a.show, ""))
		// POST .../{id}/{verb}: the last segment is the verb (a control
		// request, or outcome), the rest the id.
		r.Post("/trajectories/*", a.handle(a.postTrajectory, RoleOperator))
		// PATCH .../{id}/budget raises or lowers a run's budget.
		r.Patch("/trajectories/*", a.handle(a.patchBudget, RoleOperator))
		a.approvalRoutes(r)
		r.Get("/stream", a.handle(a.streamEvents, ""))
		r.Get("/keys", a.handle(a.keysHeadroom, ""))
		r.Get("/whoami", a.handle(a.whoami, ""))
		r.Get("/reports/costs", a.handle(a.costReport, ""))
		a.tenantRoutes(r)
		a.spendLimitRoutes(r)
		r.Get("/openapi.json", document(openAPIDoc, "application/json"))
		r.Get("/events.schema.json", document(eventsSchema, "application/schema+json"))
		if a.reloader != nil {
			r.Post("/config/reload", a.handle(a.reload, RoleOperator))
		}
	})
}

// Error is an admin API error: status and a message for the caller.
type Error struct {
	Code int
	Type string
	Msg  string
	Err  error
	// RetryAfter, when set, is sent as the Retry-After header.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Code, e.Type, e.Msg) }
func (e *Error) Unwrap() error { return e.Err }

type caller struct {
	name  string
	roles []string
	// tenants are the only tenants the caller sees (admin.tokens[].tenants);
	// nil: every tenant. Another tenant's runs, approvals, events and
	// figures are absent to the caller: lists leave them out and a path
	// naming one answers 404, as for an id that does not exist.
	tenants []string
	// session is the console session the caller signed in with; nil for
	// a bearer token.
	session *Principal
}

// sees reports whether the caller may see tenant's objects.
func (c caller) sees(tenant string) bool {
	return c.tenants == nil || slices.Contains(c.tenants, tenant)
}

// errAbsent is what a caller gets for a run outside its tenants: the
// answer for a run that does not exist.
var errAbsent = fmt.Errorf("%w: not among the caller's tenants", trajectory.ErrNotFound)

func (c caller) has(role string) bool {
	for _, r := range c.roles {
		if r == role {
			return true
		}
	}
	return false
}

// handle wraps a handler that returns an error: authentication, role
// check, JSON answer.
func (a *API) handle(fn func(http.ResponseWriter, *http.Request, caller) error, role string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, ok, err := a.authenticate(r)
		switch {
		case err != nil:
		case !ok:
			// The body of a refused call is not waited for.
			w.Header().Set("Connection", "close")
			err = &Error{Code: http.StatusUnauthorized, Type: "authentication_error", Msg: "missing or invalid admin bearer token, or no console session"}
		case checkCSRF(r, c) != nil:
			err = checkCSRF(r, c)
		case role != "" && !c.has(role):
			err = &Error{Code: http.StatusForbidden, Type: "permission_error", Msg: "this call needs the " + role + " role"}
		default:
			err = fn(w, r, c)
		}
		if err != nil {
			a.writeErr(w, r, err)
		}
	}
}

// authenticate finds the caller: by the admin token when the request
// carries one (a bad one is refused, never tried as a session), else by
// its console session.
func (a *API) authenticate(r *http.Request) (caller, bool, error) {
	h := r.Header.Get("Authorization")
	if h == "" && r.Header.Get("X-Api-Key") == "" && a.sessions != nil {
		p, ok, err := a.sessions.Principal(r)
		if err != nil || !ok {
			return caller{}, false, err
		}
		conncap.Trust(r.Context())
		return caller{name: p.Name, roles: p.Roles, tenants: p.Tenants, session: &p}, true, nil
	}
	c, ok := a.byToken(r, h)
	return c, ok, nil
}

func (a *API) byToken(r *http.Request, h string) (caller, bool) {
	const bearer = "bearer "
	var tok string
	switch {
	case len(h) > len(bearer) && strings.EqualFold(h[:len(bearer)], bearer):
		tok = h[len(bearer):]
	case h == "" && r.Header.Get("X-Api-Key") != "":
		// As Anthropic's Admin API clients send their key.
		tok = r.Header.Get("X-Api-Key")
	default:
		return caller{}, false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	var found *token
	for i := range a.tokens {
		if subtle.ConstantTimeCompare(sum[:], a.tokens[i].hash[:]) == 1 {
			found = &a.tokens[i]
		}
	}
	if found == nil {
		return caller{}, false
	}
	conncap.Trust(r.Context())
	return caller{name: found.name, roles: found.roles, tenants: found.tenants}, true
}

func (a *API) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	var e *Error
	switch {
	case errors.As(err, &e):
	case errors.Is(err, trajectory.ErrNotFound):
		e = &Error{Code: http.StatusNotFound, Type: "not_found_error", Msg: "no such trajectory"}
	case errors.Is(err, trajectory.ErrExists):
		e = &Error{Code: http.StatusConflict, Type: "conflict_error", Msg: "a trajectory with that id exists"}
	default:
		a.log.LogAttrs(r.Context(), slog.LevelError, "admin call failed", slog.String("path", r.URL.Path), slog.String("error", err.Error()))
		e = &Error{Code: http.StatusServiceUnavailable, Type: "api_error", Msg: "the store could not answer; see gatekeeper's logs"}
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(e.RetryAfter.Seconds())), 10))
	}
	writeJSON(w, e.Code, map[string]any{"error": map[string]string{"type": e.Type, "message": e.Msg}})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func badRequest(msg string) error {
	return &Error{Code: http.StatusBadRequest, Type: "invalid_request_error", Msg: msg}
}

func (a *API) list(w http.ResponseWriter, r *http.Request, c caller) error {
	q := r.URL.Query()
	f := trajectory.Filter{State: trajectory.State(q.Get("state")), Tenant: q.Get("tenant"), Tenants: c.tenants,
		Person: q.Get("person"), Limit: defaultListLimit}
	if f.State != "" && !f.State.Valid() {
		return badRequest("unknown state " + strconv.Quote(q.Get("state")))
	}
	if len(f.Person) > maxPersonQuery {
		return badRequest(fmt.Sprintf("person is at most %d bytes", maxPersonQuery))
	}
	if v := q.Get("min_budget_used"); v != "" {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || x < 0 {
			return badRequest("min_budget_used must be a non-negative number")
		}
		f.MinBudgetUsed = x
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			return badRequest(fmt.Sprintf("limit must be 1..%d", maxListLimit))
		}
		f.Limit = n
	}
	recs, err := a.store.List(r.Context(), f)
	if err != nil {
		return err
	}
	if recs == nil {
		recs = []*trajectory.Record{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"trajectories": recs})
	return nil
}

func (a *API) show(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := url.PathUnescape(chi.URLParam(r, "*"))
	if err != nil || id == "" {
		return badRequest("missing trajectory id")
	}
	events := false
	if rest, ok := strings.CutSuffix(id, "/events"); ok {
		id, events = rest, true
	}
	if id, err = a.resolve(r.Context(), c, id, r.URL.Query().Get("tenant")); err != nil {
		return err
	}
	if events {
		return a.events(w, r, id)
	}
	rec, err := a.store.Get(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rec)
	return nil
}

func (a *API) events(w http.ResponseWriter, r *http.Request, id string) error {
	q := r.URL.Query()
	var after int64
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return badRequest("after must be a non-negative event sequence number")
		}
		after = n
	}
	limit := maxEventsLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxEventsLimit {
			return badRequest(fmt.Sprintf("limit must be 1..%d", maxEventsLimit))
		}
		limit = n
	}
	if _, err := a.store.Get(r.Context(), id); err != nil {
		return err
	}
	evs, err := a.store.Events(r.Context(), id, after, limit)
	if err != nil {
		return err
	}
	if evs == nil {
		evs = []trajectory.Event{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": evs})
	return nil
}

// createRequest is the body of POST /admin/v1/trajectories.
type createRequest struct {
	ID       string             `json:"id"`
	Tenant   string             `json:"tenant"`
	ParentID string             `json:"parent_id"`
	Budget   *trajectory.Budget `json:"budget"`
}

func (a *API) create(w http.ResponseWriter, r *http.Request, c caller) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxCreateBodySize))
	dec.DisallowUnknownFields()
	var req createRequest
	if err := dec.Decode(&req); err != nil {
		return badRequest("body must be a JSON object {id?, tenant, parent_id?, budget?}: " + err.Error())
	}
	var tenant *config.Tenant
	tenants := a.config().Tenants
	for i := range tenants {
		if tenants[i].Name == req.Tenant {
			tenant = &tenants[i]
		}
	}
	if tenant == nil || !c.sees(tenant.Name) {
		return badRequest("unknown tenant " + strconv.Quote(req.Tenant))
	}
	if req.ID == "" {
		req.ID = newID(a.now())
	}
	if !trajectory.ValidID(req.ID) {
		return badRequest("id must be 1-128 characters of A-Z a-z 0-9 . _ : -")
	}
	if req.ParentID != "" {
		// A child is named under its parent, so that one id names its
		// whole chain (and, in Redis, its tree's slot).
		req.ID = req.ParentID + "/" + req.ID
	} else if other, err := a.store.Get(r.Context(), req.ID); err == nil && other.Tenant != tenant.Name {
		// The name is another tenant's: this tenant's run of that name
		// lives in its own namespace.
		req.ID = trajectory.TenantScoped(req.ID, tenant.Name)
	} else if err == nil {
		// Not counted against the tenant's runs a second time.
		return trajectory.ErrExists
	}
	now := a.now()
	rec := &trajectory.Record{ID: req.ID, ParentID: req.ParentID, Tenant: tenant.Name, State: trajectory.Ready,
		CreatedAt: now, UpdatedAt: now, Stage: "nominal", CreatedBy: trajectory.Creator{Kind: trajectory.CreatorOperator, Name: c.name},
		Budget: trajectory.Budget{Turns: int64(tenant.Budget.Turns), Tokens: tenant.Budget.Tokens,
			WallClockS: int64(tenant.Budget.WallClock.Std().Seconds()), Dollars: tenant.Budget.Dollars,
			OnExhaust: tenant.Budget.OnExhaust}}
	if req.Budget != nil {
		b := *req.Budget
		if b.Turns < 0 || b.Tokens < 0 || b.WallClockS < 0 || b.Dollars < 0 {
			return badRequest("budget values must be >= 0 (0 means no ceiling)")
		}
		if !trajectory.ValidOnExhaust(b.OnExhaust) {
			return badRequest(`budget.on_exhaust must be "fail" or "pause"`)
		}
		if b.OnExhaust == "" {
			b.OnExhaust = tenant.Budget.OnExhaust
		}
		rec.Budget = b
	}
	if req.ParentID != "" {
		p, err := a.store.Get(r.Context(), req.ParentID)
		if err == nil && !c.sees(p.Tenant) {
			err = errAbsent
		}
		if err != nil {
			if errors.Is(err, trajectory.ErrNotFound) {
				return badRequest("parent trajectory " + strconv.Quote(req.ParentID) + " does not exist")
			}
			return err
		}
		if p.Tenant != tenant.Name {
			return badRequest("parent trajectory belongs to another tenant")
		}
	}
	data, _ := json.Marshal(map[string]string{"by": c.name})
	ev := trajectory.Event{At: now, Trajectory: rec.ID, Type: trajectory.EventCreated, To: rec.State, Data: data}
	if req.ParentID != "" {
		// A child counts against limits.max_children as a thread's does,
		// in the store's step that adds it.
		max := a.config().Limits.MaxChildren
		err := a.store.CreateChild(r.Context(), rec, max, ev)
		if _, ok := errors.AsType[*trajectory.ChildrenFullError](err); ok {
			return &Error{Code: http.StatusConflict, Type: "conflict_error",
				Msg: fmt.Sprintf("parent trajectory %s has %d children, its limit (limits.max_children); %s was not created", req.ParentID, max, rec.ID)}
		}
		if err != nil {
			return err
		}
	} else {
		// A run an operator starts counts against its tenant's live
		// and hourly ceilings as an agent's does.
		if err := a.startRun(r.Context(), tenant, rec.ID); err != nil {
			return err
		}
		if err := a.store.Create(r.Context(), rec, ev); err != nil {
			if !errors.Is(err, trajectory.ErrExists) {
				a.unstart(tenant, rec.ID)
			}
			return err
		}
	}
	rec, err := a.store.Get(r.Context(), rec.ID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, rec)
	return nil
}

func newID(now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
	return fmt.Sprintf("run-%s-%x", now.UTC().Format("20060102T150405"), b)
}
