package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"gatekeeper/approvals"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/admit"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/deadline"
	"gatekeeper/proxy/internal/dialect"
	"gatekeeper/proxy/internal/escrow"
	"gatekeeper/proxy/internal/keys"
	"gatekeeper/proxy/internal/notice"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/proxy/internal/shape"
	"gatekeeper/proxy/internal/sweep"
	"gatekeeper/proxy/internal/watchdog"
	"gatekeeper/proxy/internal/wire"
	"gatekeeper/streaming"
	"gatekeeper/telemetry"
	"gatekeeper/trajectory"
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
	// reclaimed is the silent call of another replica that this turn's
	// admission took for lost and charged.
	reclaimed sweep.Lost
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

	// linkReply: the turn's reply is to be linked to its run (linkRun), so
	// that its conversation's later turns, which name no session, find it.
	linkReply bool
}

// serveTurn runs one model call, top to bottom: read the agent's request,
// admit it on its thread record, shape it, send it, relay the reply
// (which a gate may hold for approval), settle. The turn is recorded at
// one of two points: the hold opened (holdOpened) or the settle. An error
// returned is what the agent gets, written by apierr.Write; once the reply
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
	body, err := wire.ReadBody(w, r, req.rules.cfg.Limits.MaxBodyBytes, req.rules.cfg.Limits.BodyTimeout.Std())
	if err != nil {
		return nil, mark, err
	}
	pr, err := dialect.Stream(req.api).ParseRequest(body)
	if err != nil {
		return nil, mark, apierr.New(http.StatusBadRequest, apierr.InvalidRequest,
			"request body is not a valid JSON object: "+err.Error())
	}
	if err := wire.CheckTurnBody(req.api, body, req.up.allowsBackground()); err != nil {
		return nil, mark, err
	}
	if err := routeTurn(pr, req, r.URL.Query()); err != nil {
		return nil, mark, err
	}
	if err := modelAllowed(req, pr.Model); err != nil {
		return nil, mark, err
	}
	if mark, err = wire.ReadMark(r.Header); err != nil {
		return nil, mark, err
	}
	if req.tenant.RefuseUngatedMCP && dialect.Of(req.api).HostedMCP {
		if err := wire.CheckHostedMCP(body); err != nil {
			return nil, mark, err
		}
	}
	if b := r.Header.Get("X-Gatekeeper-Budget"); b != "" {
		// Budgets change only through config or the admin API.
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "ignored agent-supplied budget header", slog.String("tenant", req.tenant.Name))
	}
	t := &turn{s: s, req: req, pr: pr, body: body, started: s.now(), ctx: r.Context(), log: s.log, rate: req.keyTurn(req.up),
		maxOut: shape.ClampOutput(pr.MaxOutputTokens, req.tenant.CallLimits.MaxOutputTokens)}
	if esc := req.rules.esc; esc != nil && esc.ForTenant(req.tenant.Name) {
		t.gated, t.key, t.hdr = true, escrow.TurnKey(req.api, dialect.Of(req.api).TurnFields, body), r.Header
	}
	return t, mark, nil
}

// routeTurn takes the model and the streaming of a turn from its path when
// its API puts them there (Gemini). A stream in another form than SSE (a
// Gemini stream without alt=sse is one JSON array) is refused: gatekeeper
// reads replies as SSE events or whole bodies only.
func routeTurn(pr *streaming.Request, req *request, q url.Values) error {
	d := dialect.Of(req.api)
	if d.Route == nil {
		return nil
	}
	pr.Model, pr.Stream, _ = d.Route(req.rest)
	alt := q["alt"]
	switch {
	case pr.Stream && (len(alt) != 1 || alt[0] != "sse"):
		return apierr.BadRequest("gatekeeper streams Gemini replies as server-sent events only: send alt=sse, once, in the query")
	case !pr.Stream && len(alt) > 0 && (len(alt) != 1 || alt[0] != "json"):
		return apierr.BadRequest("gatekeeper reads a generateContent reply as one JSON body: send no alt, or alt=json")
	}
	return nil
}

// admitTurn holds the turn's share of its tenant's ceilings and admits it
// on its thread record (admit), its key take riding along. A turn that
// re-attaches to a held one (t.hold) gives both back: it makes no call.
func (t *turn) admitTurn(r *http.Request, mark trajectory.Mark) error {
	ctx := r.Context()
	// The store calls that admit the turn end store.timeout from here,
	// together: a store that stopped answering is told to the agent on
	// time.
	actx := deadline.WithBudget(ctx, t.s.admitBudget)
	if err := t.reserveTenant(actx); err != nil {
		return err
	}
	t.rate.Ride(outcome.EstimateTokens(int64(len(t.body))), t.maxOut)
	if err := t.admit(actx, r); err != nil {
		t.rate.DropRide(ctx)
		t.req.rules.ceilings.Release(context.WithoutCancel(ctx), t.log, t.req.tenant.Name, &t.ceil)
		return admitted(err)
	}
	t.log = turnLogger(t.s.log, [turnLogAttrs]slog.Attr{slog.String("request_id", t.req.id), slog.String("trajectory", t.recID),
		slog.String("tenant", t.req.tenant.Name), slog.String("model", t.pr.Model), slog.String("api", string(t.req.api))})
	if p := t.req.person; p != nil {
		t.log = t.log.With(slog.String("person", p.Label()), slog.String("groups", strings.Join(p.Groups, ",")))
	}
	if !mark.Empty() {
		t.recordMark(ctx, mark)
	}
	if t.hold != nil {
		t.rate.DropRide(ctx)
		t.req.rules.ceilings.Release(context.WithoutCancel(ctx), t.log, t.req.tenant.Name, &t.ceil)
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
	ts := telemetry.TurnStart{
		Provider: req.up.cfg.Name, ProviderName: req.up.cfg.API, API: string(req.api), Model: t.pr.Model,
		Trajectory: t.recID, Parent: t.parentID, Tenant: req.tenant.Name, Stage: string(t.adm.Decision.Stage),
		ServerAddress: req.up.target.Host}
	if p := req.person; p != nil {
		ts.Person, ts.Group = p.Label(), req.rules.cfg.Identity.GroupOf(p.Groups)
	}
	sctx, tt := s.tel.StartTurn(r.Context(), r.Header, ts)
	t.tt = tt
	// From here the turn's work (its settle too) runs in its span.
	t.ctx = sctx
	t.observe(t.admitEvents)
	uctx, cancel := context.WithCancel(sctx)
	t.cancelUp = cancel
	s.live.Add(t)
	if s.ending.Load() {
		// Admitted while EndStreams ran: ended as those it found were.
		t.stop(stopShutdown)
	}
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
	if err := keyRefused(t.rate.Acquire(ctx, outcome.EstimateTokens(int64(len(t.body))), t.maxOut, h)); err != nil {
		if ctx.Err() == nil {
			t.settle(rateLimitedOutcome(err))
		}
		return nil, err
	}
	q := r.URL.RawQuery
	if !t.req.tenant.Forwards() {
		q = wire.ForwardQuery(q) // the virtual key may be in it
	}
	return t.send(ctx, r.Header, q)
}

// settleUnrecorded is the settle of a turn whose reply never reached the
// point where it is recorded (a panic, a path that forgot): it is charged
// as failed, so that no admitted call stays reserved. A no-op otherwise.
func (t *turn) settleUnrecorded() {
	if v := recover(); v != nil {
		t.failed(fmt.Errorf("aborted: %v", v))
		panic(v)
	}
	t.failed(errNotRecorded)
}

// errNotRecorded is the failure settleUnrecorded records, made once:
// every turn's deferred call names it, and all but a lost one ignore it.
var errNotRecorded = errors.New("reply not recorded")

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
			if t.filter, err = dialect.Stream(t.req.api).NewCallFilter(allowAll, shape.Refusal(t.adm.Decision)); err != nil {
				return err
			}
		}
		// Tool calls reach the agent only once the reply's stop shows
		// them whole: a call cut by an operator or by the output limit is
		// never delivered in part.
		t.filter.Hold()
		t.filter.NoticeCut(notice.Cut)
		resp.Body = t.streamBody(resp.Body)
		// The filter may rewrite the stream (a notice, a call withheld,
		// a repeated member read one way): a provider's length would
		// cut it or leave it short.
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
	default:
		cutOnly := t.filter == nil
		if cutOnly {
			var err error
			if t.filter, err = dialect.Stream(t.req.api).NewCallFilter(allowAll, shape.Refusal(t.adm.Decision)); err != nil {
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
		resp.Body = t.jsonBody(resp.Body, resp.StatusCode, t.req.rules.cfg.Limits.MaxBodyBytes)
	}
	return nil
}

func isEventStream(ct string) bool {
	return len(ct) >= 17 && ct[:17] == "text/event-stream"
}
