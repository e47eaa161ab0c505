package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"gatekeeper/approvals"
	"gatekeeper/internal/ride"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/admit"
	"gatekeeper/proxy/internal/chainrule"
	"gatekeeper/proxy/internal/escrow"
	"gatekeeper/proxy/internal/keys"
	"gatekeeper/proxy/internal/notice"
	"gatekeeper/proxy/internal/shape"
	"gatekeeper/proxy/internal/threadid"
	"gatekeeper/proxy/internal/watchdog"
	"gatekeeper/streaming"
	"gatekeeper/telemetry"
	"gatekeeper/trajectory"
)

// Admission outcomes that send a turn to another thread record.
var (
	errBusy        = errors.New("proxy: thread has a call in flight")
	errOtherThread = errors.New("proxy: record serves another conversation")
)

// turn is one model call going through the proxy.
type turn struct {
	s       *Server
	req     *request
	pr      *streaming.Request
	body    []byte
	recID   string // the thread record the turn belongs to
	started time.Time
	ctx     context.Context // the agent's request context
	log     *slog.Logger
	adm     admit.Admission
	// call is the turn's call id (admitCall), and tried what each attempt
	// at admitting it reserved under that id.
	call  string
	tried []admit.Admission
	worst *meter.Worst // the call's worst case, once read (admitCall)
	// streamed is the reply's output so far, in bytes, for the heartbeat.
	streamed atomic.Int64

	filter     *streaming.CallFilter // restrict stage: withholds calls outside the grant
	removed    []string              // tools the restrict stage removed
	stripUsage bool                  // usage was asked for on the agent's behalf
	maxOut     int64                 // the call's output limit after the tenant's and the budget's clamps; 0 when none
	interrupt  string                // an operator's message for this request
	truncated  int64                 // the thread's last replies cut at their output limit, in a row
	loop       watchdog.Step         // the loop watchdog's step for this request
	proposed   *watchdog.Seen        // a whole reply's calls as the provider sent them, when some were withheld
	extras     streaming.Extras      // the reply's 1-hour cache writes and service tier
	ceil       admit.Hold            // what the call holds against its tenant's ceilings
	// busyElsewhere: admission found the record busy with a call another
	// replica admitted.
	busyElsewhere bool
	shared        bool // the thread shares a last child: its parent has limits.max_children
	sharedNew     bool // and learned so in this request: a children_full event is due

	stopped  stopKind           // why the call was stopped early; set once
	cancelUp context.CancelFunc // aborts the upstream call
	recorded bool               // the turn was recorded (settle, holdOpened): only once

	rate *keys.Turn // the call's use of its provider's keys: its ride, its grant

	tt          *telemetry.Turn    // the turn's span and metrics
	parentID    string             // the thread record's parent
	admitEvents []trajectory.Event // what admission wrote, for telemetry

	// Escrow (escrow.go); zero for a tenant without gates.
	gated       bool            // some gate applies to the tenant
	key         string          // the turn key, over the agent's body as it came
	thread      string          // the thread key
	root        string          // the root trajectory id
	hdr         http.Header     // the agent's headers, which a continuation sends on
	holdChecked bool            // admission looked for a hold of this turn and found none
	hold        *approvals.Hold // the held turn this request re-attaches to
	conts       int             // continuations before this call's reply (a continuation's sub-turn)
}

// serveTurn runs one model call, top to bottom: read the agent's request,
// admit it on its thread record, shape it, send it, relay the reply
// (which a gate may hold for approval), settle. The turn is recorded at
// one of two points: the hold opened (holdOpened) or the settle. An error
// returned is what the agent gets, written by writeError; once the reply
// has begun, the only error left is http.ErrAbortHandler.
func (s *Server) serveTurn(w http.ResponseWriter, r *http.Request, req *request) error {
	// Replies stream while the agent's request may still be open: without
	// full duplex the HTTP/1 server can cut the stream (golang/go#40747).
	_ = http.NewResponseController(w).EnableFullDuplex()

	t, mark, err := s.readTurn(w, r, req)
	if err != nil {
		return err
	}
	if err := t.admitTurn(r, mark); err != nil {
		return err
	}
	if t.hold != nil {
		return s.serveReattach(w, r, t)
	}
	w.Header().Set("X-Gatekeeper-Trajectory", trajectory.Unscoped(t.recID, req.tenant.Name))
	ctx, end := t.begin(r)
	defer end()
	defer t.settleUnrecorded()
	if err := t.shapeBody(); err != nil {
		t.rate.DropRide(r.Context())
		t.failed(err)
		return err
	}
	resp, err := t.sendTurn(ctx, r, w.Header())
	if err != nil {
		return t.sendError(ctx, err)
	}
	return t.relay(ctx, w, resp)
}

// readTurn reads the agent's request into a turn: the body within
// limits.max_body_bytes and limits.body_timeout, parsed in its dialect
// and checked; and its mark headers. Nothing is admitted yet.
func (s *Server) readTurn(w http.ResponseWriter, r *http.Request, req *request) (*turn, trajectory.Mark, error) {
	var mark trajectory.Mark
	body, err := readBody(w, r, s.cfg.Limits.MaxBodyBytes, s.cfg.Limits.BodyTimeout.Std())
	if err != nil {
		return nil, mark, err
	}
	pr, err := streamOf(req.api).ParseRequest(body)
	if err != nil {
		return nil, mark, httpErr(http.StatusBadRequest, errInvalidRequest,
			"request body is not a valid JSON object: "+err.Error())
	}
	if err := checkTurnBody(req.api, body, req.up.allowsBackground()); err != nil {
		return nil, mark, err
	}
	if mark, err = readMark(r.Header); err != nil {
		return nil, mark, err
	}
	if req.tenant.RefuseUngatedMCP && dialectOf(req.api).hostedMCP {
		if err := checkHostedMCP(body); err != nil {
			return nil, mark, err
		}
	}
	if b := r.Header.Get("X-Gatekeeper-Budget"); b != "" {
		// Budgets change only through config or the admin API.
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "ignored agent-supplied budget header", slog.String("tenant", req.tenant.Name))
	}
	t := &turn{s: s, req: req, pr: pr, body: body, started: s.now(), ctx: r.Context(), log: s.log, rate: s.sched.Turn(req.up.pool, req.tenant.Priority),
		maxOut: shape.ClampOutput(pr.MaxOutputTokens, req.tenant.CallLimits.MaxOutputTokens)}
	if s.esc != nil && s.esc.ForTenant(req.tenant.Name) {
		t.gated, t.key, t.hdr = true, escrow.TurnKey(req.api, dialectOf(req.api).turnFields, body), r.Header
	}
	return t, mark, nil
}

// admitTurn holds the turn's share of its tenant's ceilings and admits it
// on its thread record (admit), its key take riding along. A turn that
// re-attaches to a held one (t.hold) gives both back: it makes no call.
func (t *turn) admitTurn(r *http.Request, mark trajectory.Mark) error {
	ctx := r.Context()
	if err := t.reserveTenant(ctx); err != nil {
		return err
	}
	t.rate.Ride(estimateTokens(int64(len(t.body))), t.maxOut)
	if err := t.admit(ctx, r); err != nil {
		t.rate.DropRide(ctx)
		t.s.ceilings.Release(context.WithoutCancel(ctx), t.log, t.req.tenant.Name, &t.ceil)
		return admitted(err)
	}
	t.log = t.s.log.With(slog.String("request_id", t.req.id), slog.String("trajectory", t.recID), slog.String("tenant", t.req.tenant.Name),
		slog.String("model", t.pr.Model), slog.String("api", string(t.req.api)))
	if !mark.Empty() {
		t.recordMark(ctx, mark)
	}
	if t.hold != nil {
		t.rate.DropRide(ctx)
		t.s.ceilings.Release(context.WithoutCancel(ctx), t.log, t.req.tenant.Name, &t.ceil)
	}
	return nil
}

// begin opens the admitted turn's span and makes it live (an operator may
// stop it; the call deadline does). The context it returns is the
// upstream call's own: an operator's cancel or kill, or the call
// deadline, aborts the call while the agent's request stays open. end
// undoes it all.
func (t *turn) begin(r *http.Request) (ctx context.Context, end func()) {
	s, req := t.s, t.req
	sctx, tt := s.tel.StartTurn(r.Context(), r.Header, telemetry.TurnStart{
		Provider: req.up.cfg.Name, ProviderName: req.up.cfg.API, API: string(req.api), Model: t.pr.Model,
		Trajectory: t.recID, Parent: t.parentID, Tenant: req.tenant.Name, Stage: string(t.adm.Decision.Stage),
		ServerAddress: req.up.target.Host})
	t.tt = tt
	t.observe(t.admitEvents)
	uctx, cancel := context.WithCancel(sctx)
	t.cancelUp = cancel
	s.live.Add(t)
	var timer *time.Timer
	if d := req.tenant.CallLimits.CallDeadline.Std(); d > 0 {
		timer = time.AfterFunc(d, func() { t.stop(stopDeadline) })
	}
	return uctx, func() {
		if timer != nil {
			timer.Stop()
		}
		s.live.Remove(t)
		cancel()
	}
}

// shapeBody is the shape step: the admitted body rewritten for the
// turn's stage (shape), kept as what goes to the provider.
func (t *turn) shapeBody() error {
	body, err := t.shape(t.body)
	if err != nil {
		return err
	}
	t.body = body
	return nil
}

// sendTurn is the send step: the turn waits for key capacity (the wait
// reported in h, the agent's response headers), then goes to its
// provider. A turn that got no capacity is settled here: never sent, not
// charged.
func (t *turn) sendTurn(ctx context.Context, r *http.Request, h http.Header) (*http.Response, error) {
	if err := keyRefused(t.rate.Acquire(ctx, estimateTokens(int64(len(t.body))), t.maxOut, h)); err != nil {
		if ctx.Err() == nil {
			t.settle(rateLimitedOutcome(err))
		}
		return nil, err
	}
	return t.send(ctx, r.Header, r.URL.RawQuery)
}

// settleUnrecorded is the settle of a turn whose reply never reached the
// point where it is recorded (a panic, a path that forgot): it is charged
// as failed, so that no admitted call stays reserved. A no-op otherwise.
func (t *turn) settleUnrecorded() {
	if v := recover(); v != nil {
		t.failed(fmt.Errorf("aborted: %v", v))
		panic(v)
	}
	t.failed(errors.New("reply not recorded"))
}

// admit finds the turn's thread record and, in one atomic step over the
// record and its ancestors, checks the budget, reserves the call's
// estimate and moves the record READY → CALLING_MODEL, accepting the tool
// results the request carries. A thread that already has a call in flight
// forks a sibling: a call is never blocked for that.
func (t *turn) admit(ctx context.Context, r *http.Request) error {
	s := t.s
	rid, err := rootID(r, t.req, t.pr)
	if err != nil {
		return err
	}
	key, parentKey := threadid.Key(r.Header, t.pr.Fingerprint)
	t.thread, t.root = key, rid
	ids := make([]string, len(t.pr.ToolResults))
	for i, tr := range t.pr.ToolResults {
		ids[i] = tr.ID
	}
	hintKey := t.req.tenant.Name + "\x00" + rid + "\x00" + key
	if h, ok := s.hints.Get(hintKey); ok {
		// The thread's record is known from an earlier call: admission is
		// one store call.
		t.shared = h.Shared
		err := t.admitOn(ctx, h.Parent, h.Base, key, ids)
		if !errors.Is(err, errOtherThread) && !errors.Is(err, trajectory.ErrNotFound) {
			return err
		}
		s.hints.Drop(hintKey)
	}
	named := t.req.trajectoryID != "" || r.Header.Get("X-Gatekeeper-Trajectory") != ""
	if named {
		if rid, err = s.records.Scoped(ctx, rid, t.req.tenant.Name); err != nil {
			return err
		}
	}
	root, err := s.records.Root(ctx, rid, named, t.req.tenant)
	if errors.Is(err, admit.ErrOtherTenant) && named && !strings.Contains(rid, "@") {
		// Another tenant took the name between the look and the create.
		rid = trajectory.TenantScoped(rid, t.req.tenant.Name)
		root, err = s.records.Root(ctx, rid, named, t.req.tenant)
	}
	if err != nil {
		return err
	}
	parent := root
	if parentKey != "" {
		if p, err := s.store.Get(ctx, threadid.Child(root.ID, parentKey)); err == nil {
			parent = p
		}
	}
	// The root serves the first conversation that claims it; every other
	// conversation is a child record.
	candidate := threadid.Child(parent.ID, key)
	if parent == root && (root.Thread == key || root.Thread == "") {
		candidate = root.ID
	} else if candidate, err = t.child(ctx, parent.ID, candidate, key); err != nil {
		return err
	}
	h := admit.Hint{Parent: parent.ID, Base: candidate}
	err = t.admitOn(ctx, h.Parent, h.Base, key, ids)
	if errors.Is(err, errOtherThread) && candidate == root.ID {
		// Another conversation claimed the root after it was read.
		if h.Base, err = t.child(ctx, root.ID, threadid.Child(root.ID, key), key); err != nil {
			return err
		}
		err = t.admitOn(ctx, h.Parent, h.Base, key, ids)
	}
	h.Shared = t.shared
	if errors.Is(err, errOtherThread) || errors.Is(err, trajectory.ErrNotFound) {
		return storeErr(err)
	}
	if err == nil {
		s.hints.Put(hintKey, h)
	}
	return err
}

// child returns the record a thread under parent is admitted on: its own
// child id, created when missing, or, once parent has
// limits.max_children children, the last of them, shared.
func (t *turn) child(ctx context.Context, parent, id, key string) (string, error) {
	err := t.s.records.Child(ctx, parent, t.req.tenant.Name, id, key)
	var full *admit.ChildrenFull
	if errors.As(err, &full) {
		t.shared, t.sharedNew = true, true
		t.log.LogAttrs(ctx, slog.LevelWarn, "record has limits.max_children children; the thread shares the last",
			slog.String("trajectory", parent), slog.String("shares", full.Last))
		return full.Last, nil
	}
	return id, err
}

// admitOn admits the turn on the thread record base, or on a sibling of
// it when base (and each earlier sibling) already has a call in flight.
func (t *turn) admitOn(ctx context.Context, parent, base, key string, ids []string) error {
	candidate := base
	for n := 1; n <= threadid.MaxSiblings; n++ {
		if n > 1 {
			// A sibling is a child of the busy thread's parent (of the
			// root when the busy thread is the root itself).
			candidate = threadid.Sibling(parent, base, n)
			var full *admit.ChildrenFull
			if err := t.s.records.Child(ctx, parent, t.req.tenant.Name, candidate, key); errors.As(err, &full) {
				break
			} else if err != nil {
				return err
			}
		}
		chain, adm, err := t.admitWaiting(ctx, candidate, key, ids)
		if errors.Is(err, errAwaiting) {
			// The record holds a reply for approval, or has just released
			// one: this request may be a retry of that turn.
			opening := errors.Is(err, errHoldOpening)
			if found, err := t.findHold(ctx, candidate, opening); found || err != nil {
				return err
			}
			chain, adm, err = t.admitWaiting(ctx, candidate, key, ids)
		}
		if errors.Is(err, errBusy) {
			continue
		}
		if err != nil {
			if errors.Is(err, errOtherThread) || errors.Is(err, trajectory.ErrNotFound) {
				return err
			}
			return storeErr(err)
		}
		t.recID, t.parentID = chain[0].ID, chain[0].ParentID
		t.adm = adm
		if adm.Ended {
			t.rate.DropRide(ctx)
			return endedError(chain[0])
		}
		if adm.Decision.Stage == meter.Halt {
			t.rate.DropRide(ctx)
			return admit.Halted(chain[0], adm)
		}
		if adm.MaxOut > 0 {
			t.maxOut = adm.MaxOut
		}
		return nil
	}
	return &HTTPError{Code: http.StatusTooManyRequests, Type: errRateLimited, RetryAfter: 2 * time.Second,
		Msg: fmt.Sprintf("more than %d calls of one conversation are in flight; retry shortly", threadid.MaxSiblings)}
}

// admitWaiting runs the admission step on record id, waiting while the
// record is paused (until resumed, or limits.pause_hold) and while the
// calls in flight hold the rest of its budget (until admit.WaitMax).
func (t *turn) admitWaiting(ctx context.Context, id, key string, ids []string) ([]*trajectory.Record, admit.Admission, error) {
	var adm admit.Admission
	budgetSince, pausedSince := time.Time{}, time.Time{}
	wait := 5 * time.Millisecond
	var waitedOther time.Duration // looking again at a thread busy with another replica's call
	busyTries := 0
	for retried := false; ; {
		var evs []trajectory.Event
		tried := len(t.tried)
		// The settles of the thread's earlier calls that wait behind their
		// replies (behind.go) go in the same update, ahead of admission.
		pend, err := t.s.behind.Take(ctx, id)
		if err != nil {
			return nil, adm, err
		}
		pevs, perrs := make([][]trajectory.Event, len(pend)), make([]error, len(pend))
		uctx := ctx
		var riders []ride.Rider
		if t.rate.Riding() != nil && !t.rate.Riding().Sent() {
			// The key take goes in the update's round trip, once.
			riders = append(riders, t.rate.Riding())
		}
		// So do the key settles of the settles it takes.
		keys := rideKeySettles(pend)
		if keys != nil {
			riders = append(riders, keys)
		}
		if len(riders) > 0 {
			uctx = ride.With(ctx, ride.Join(riders...))
		}
		chain, err := t.s.store.UpdateChain(uctx, id, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
			var all []trajectory.Event
			for i, p := range pend {
				pevs[i], perrs[i] = p.apply(chain)
				switch {
				case perrs[i] == nil:
					all = append(all, pevs[i]...)
				case !errors.Is(perrs[i], errSettled) && !errors.Is(perrs[i], errCallGone):
					return nil, perrs[i]
				}
			}
			var err error
			adm, evs, err = t.admitChain(chain, key, ids)
			return append(all, evs...), err
		})
		keys.Finish(context.WithoutCancel(ctx))
		if err == nil {
			t.admitEvents = evs
			for i, p := range pend {
				p.done(ctx, pevs[i], perrs[i])
			}
			t.s.behind.Applied(pend)
		} else {
			t.s.behind.GiveBack(pend)
		}
		if (err != nil || adm.Paused) && t.rate.Riding() != nil && t.rate.Riding().Sent() {
			// Refused, held, or unanswered: the take that rode with the
			// update goes back, and the turn takes its key after
			// admission, as a turn whose store carries no take.
			t.rate.DropRide(ctx)
		}
		switch {
		case errors.Is(err, errBusy) && t.busyElsewhere && t.s.behind != nil && waitedOther < busyElsewhereMax:
			// Another replica's call, whose settle may be waiting behind
			// its reply there for a window, or for its flush on a busy
			// replica: the thread is looked at again, backing off, for
			// busyElsewhereMax before a sibling is forked for it.
			step := max(t.s.behind.Window(), time.Millisecond) << min(busyTries, 6)
			busyTries++
			waitedOther += step
			if sleepCtx(ctx, step) != nil {
				return nil, adm, ctx.Err()
			}
			// The store's update refuses from this replica's copy of the
			// record without asking Redis; a read makes the copy current.
			if _, err := t.s.store.Get(ctx, id); err != nil && !errors.Is(err, trajectory.ErrNotFound) {
				return nil, adm, err
			}
		case errors.Is(err, trajectory.ErrUnavailable) && len(t.tried) > tried:
			// The reservation may have been saved with its answer lost.
			// Admission is idempotent by the call id, so it is sent
			// again once, unless the store took all of store.timeout to
			// fail (the turn waits no longer); failing that, whatever was
			// saved is given back.
			if !retried && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
				retried = true
				continue
			}
			t.abandon(id, err)
			return nil, adm, err
		case errors.Is(err, admit.ErrWait):
			if budgetSince.IsZero() {
				budgetSince = time.Now()
			}
			if time.Since(budgetSince) > admit.WaitMax || sleepCtx(ctx, wait) != nil {
				return nil, adm, &HTTPError{Code: http.StatusTooManyRequests, Type: errRateLimited, RetryAfter: 5 * time.Second,
					Msg: "the calls this run has in flight hold the rest of its budget; retry when they finish", Err: err}
			}
			wait = min(wait*2, admit.WaitStep)
		case errors.Is(err, errPausedWait) || err == nil && adm.Paused:
			// Held, not forwarded, until an operator resumes the run: a
			// resume signal wakes the wait, a poll covers a lost one.
			if pausedSince.IsZero() {
				pausedSince = time.Now()
			}
			hold := t.s.cfg.Limits.PauseHold.Std()
			left := hold - time.Since(pausedSince)
			if left <= 0 {
				return nil, adm, &HTTPError{Code: http.StatusServiceUnavailable, Type: errTrajectoryPaused, RetryAfter: 30 * time.Second,
					Msg: fmt.Sprintf("trajectory %s is paused (by an operator, by the loop watchdog, or until its budget is raised); retry later", trajectory.Unscoped(id, t.req.tenant.Name))}
			}
			woken, stop := t.s.live.Wait(id)
			select {
			case <-woken:
			case <-time.After(min(left, pausePoll)):
			case <-ctx.Done():
				stop()
				return nil, adm, ctx.Err()
			}
			stop()
		default:
			return chain, adm, err
		}
	}
}

// busyElsewhereMax bounds how long an admission looks again at a thread
// whose call another replica admitted, before it forks a sibling: that
// call's reply may have ended with its settle still waiting behind it
// (behind.go).
const busyElsewhereMax = 200 * time.Millisecond

// admitChain is the admission step on a thread record (chain[0]) and its
// ancestors, run inside the store's atomic update.
func (t *turn) admitChain(chain []*trajectory.Record, key string, ids []string) (admit.Admission, []trajectory.Event, error) {
	now := t.s.now()
	rec, root := chain[0], chain[len(chain)-1]
	t.busyElsewhere = false
	if root.Tenant != t.req.tenant.Name {
		// Names are the tenant's own: another tenant's record is not
		// there for this one.
		return admit.Admission{}, nil, trajectory.ErrNotFound
	}
	if adm, ok := admit.Own(chain, t.call, t.tried, now); ok {
		// An earlier attempt was saved though its answer was lost: the
		// call is admitted, once.
		return adm, nil, nil
	}
	for _, r := range chain {
		if r.State.Terminal() {
			return admit.Admission{}, nil, endedError(r)
		}
	}
	for _, r := range chain[1:] {
		if r.State == trajectory.Paused {
			// A thread started under a paused run waits with it.
			return admit.Admission{}, nil, errPausedWait
		}
	}
	switch {
	case rec.Thread != "" && rec.Thread != key && !t.shared:
		return admit.Admission{}, nil, errOtherThread
	case rec.State == trajectory.CallingModel && len(ids) == 0 && t.gated && !t.holdChecked && !t.s.sweeper.Silent(rec, now):
		// The call in flight may be holding its reply: a retry of that
		// turn re-attaches rather than fork a sibling that asks again.
		return admit.Admission{}, nil, errHoldOpening
	case rec.State == trajectory.CallingModel && !t.s.sweeper.Silent(rec, now):
		t.busyElsewhere = rec.CallOwner != t.s.owner
		return admit.Admission{}, nil, errBusy
	case rec.State == trajectory.Paused:
		return admit.Admission{}, nil, errPausedWait
	case rec.State == trajectory.AwaitingApproval && t.gated && !t.holdChecked,
		rec.State == trajectory.WaitingTool && len(ids) == 0 && t.gated && !t.holdChecked:
		// A retry of a held turn carries no tool results.
		return admit.Admission{}, nil, errAwaiting
	case rec.State == trajectory.AwaitingApproval || rec.State == trajectory.Finalizing:
		return admit.Admission{}, nil, errBusy
	}
	var evs []trajectory.Event
	if rec.Thread == "" {
		rec.Thread = key
	} else if rec.Thread != key && t.sharedNew && len(chain) > 1 {
		t.sharedNew = false
		evs = append(evs, chainrule.Event(chain[1].ID, now, trajectory.EventChildrenFull, map[string]any{
			"thread": key, "shares": rec.ID, "max_children": t.s.cfg.Limits.MaxChildren}))
	}
	if rec.State == trajectory.CallingModel {
		// The call in flight outlived any call this tenant may make: the
		// replica serving it is gone. Its reservation is given back, and
		// its id kept: should its reply still arrive, it is charged.
		lost := rec.Call
		tev, err := chainrule.Reclaim(chain, now, chainrule.LostCall)
		if err != nil {
			return admit.Admission{}, nil, err
		}
		rec.LostCalls = keepLost(rec.LostCalls, lost)
		evs = append(evs, tev...)
	}
	check, ts, err := rec.AcceptToolResults(ids, now)
	if err != nil {
		return admit.Admission{}, nil, err
	}
	evs = append(evs, trajectory.EventsFor(rec.ID, ts)...)
	if len(check.Accepted) > 0 || len(check.Unanswered) > 0 {
		evs = append(evs, chainrule.Event(rec.ID, now, trajectory.EventToolResults, map[string]any{
			"accepted": check.Accepted, "unanswered": check.Unanswered}))
	}
	if len(check.Unknown) > 0 {
		// Results for calls that are not pending: late, repeated or forged.
		// They are dropped from accounting and kept for audit.
		evs = append(evs, chainrule.Event(rec.ID, now, trajectory.EventToolResultUnknown, map[string]any{"ids": check.Unknown}))
	}
	if c := rec.Pending.Control; c != nil && rec.State == trajectory.Ready {
		// The request is a turn boundary: a pause or an operator's
		// message waiting for it applies now.
		switch c.Kind {
		case trajectory.ControlPause:
			pevs, err := chainrule.ApplyPause(rec, c, now)
			if err != nil {
				return admit.Admission{}, nil, err
			}
			return admit.Admission{Paused: true}, append(evs, pevs...), nil
		case trajectory.ControlInterrupt:
			rec.TakeControl()
			t.interrupt = c.Message
			evs = append(evs, chainrule.ControlApplied(rec.ID, c, now))
		}
	}
	if rec.TruncationsInRow > 0 {
		t.truncated = rec.TruncationsInRow
	}
	var wevs []trajectory.Event
	t.loop, wevs, err = watchdog.Request(t.s.cfg.WatchdogFor(t.req.tenant), rec, t.pr.ToolResults, check.Accepted, t.req.tenant.ReadOnlyTools, now)
	if err != nil {
		return admit.Admission{}, nil, err
	}
	evs = append(evs, wevs...)
	switch {
	case rec.State == trajectory.Paused:
		return admit.Admission{Paused: true}, evs, nil
	case rec.State.Terminal():
		return admit.Admission{Ended: true}, evs, nil
	}
	adm, bevs, err := t.reserve(chain, now)
	if err != nil {
		return admit.Admission{}, nil, err
	}
	evs = append(evs, bevs...)
	if adm.Decision.Stage == meter.Halt {
		return adm, evs, nil
	}
	evs = append(evs, t.ceil.ClampEvent(rec.ID, now)...)
	ts, err = rec.BeginTurn(now)
	if err != nil {
		return admit.Admission{}, nil, err
	}
	rec.Provider = t.req.up.cfg.Name
	rec.Model = t.pr.Model
	return adm, append(evs, trajectory.EventsFor(rec.ID, ts)...), nil
}

// endedError answers a call of a run that has finished: with
// budget_exceeded when its budget stopped it, so the agent learns why.
func endedError(rec *trajectory.Record) error {
	if rec.ExitReason == chainrule.ExitBudgetExceeded {
		return &HTTPError{Code: http.StatusPaymentRequired, Type: errBudgetExceeded, NoRetry: true,
			Msg: fmt.Sprintf("trajectory %s was stopped by its %s budget; an operator can start a new trajectory", trajectory.Unscoped(rec.ID, rec.Tenant), rec.BindingDimension)}
	}
	return &HTTPError{Code: http.StatusForbidden, Type: errTrajectoryCanceled, NoRetry: true,
		Msg: fmt.Sprintf("trajectory %s has ended (%s %s); start a new trajectory to continue", trajectory.Unscoped(rec.ID, rec.Tenant), rec.State, rec.ExitReason)}
}

// attach takes over the upstream reply: it labels it with the trajectory
// and tees its body through the decoder.
func (t *turn) attach(resp *http.Response) error {
	// The header set on the agent's response names the record; the
	// provider has no say in it.
	resp.Header.Del("X-Gatekeeper-Trajectory")
	resp.Header.Del(keys.HeaderQueueWait)
	ct := resp.Header.Get("Content-Type")
	switch {
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		resp.Body = t.jsonBody(resp.Body, resp.StatusCode, 1<<20)
	case isEventStream(ct):
		if t.filter == nil {
			var err error
			if t.filter, err = streamOf(t.req.api).NewCallFilter(allowAll, shape.Refusal(t.adm.Decision)); err != nil {
				return err
			}
		}
		// Tool calls reach the agent only once the reply's stop shows
		// them whole: a call cut by an operator or by the output limit is
		// never delivered in part.
		t.filter.Hold()
		t.filter.NoticeCut(notice.Cut)
		resp.Body = t.streamBody(resp.Body)
	default:
		cutOnly := t.filter == nil
		if cutOnly {
			var err error
			if t.filter, err = streamOf(t.req.api).NewCallFilter(allowAll, shape.Refusal(t.adm.Decision)); err != nil {
				return err
			}
		}
		// A call the reply was still writing at its output limit is
		// withheld, as in a stream, with the notice in its place.
		t.filter.NoticeCut(notice.Cut)
		if err := t.filterJSON(resp, cutOnly); err != nil {
			return err
		}
		if t.gated {
			return t.holdJSON(resp)
		}
		resp.Body = t.jsonBody(resp.Body, resp.StatusCode, t.s.cfg.Limits.MaxBodyBytes)
	}
	return nil
}

func isEventStream(ct string) bool {
	return len(ct) >= 17 && ct[:17] == "text/event-stream"
}
