package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"gatekeeper/streaming"
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
	recID   string   // the thread record the turn belongs to
	chain   []string // its ancestors, nearest first
	started time.Time
	ctx     context.Context // the agent's request context
	log     *slog.Logger

	once sync.Once
}

func (s *Server) serveTurn(w http.ResponseWriter, r *http.Request, req *request) {
	// Replies stream while the agent's request may still be open: without
	// full duplex the HTTP/1 server can cut the stream (golang/go#40747).
	_ = http.NewResponseController(w).EnableFullDuplex()

	limit := s.cfg.Limits.MaxBodyBytes
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, req.api, httpErr(http.StatusRequestEntityTooLarge, errInvalidRequest,
				fmt.Sprintf("request body is larger than gatekeeper's limit of %d bytes (limits.max_body_bytes)", limit)))
			return
		}
		writeError(w, req.api, httpErr(http.StatusBadRequest, errInvalidRequest, "could not read the request body"))
		return
	}
	pr, err := streaming.ParseRequest(req.api, body)
	if err != nil {
		writeError(w, req.api, httpErr(http.StatusBadRequest, errInvalidRequest,
			"request body is not a valid JSON object: "+err.Error()))
		return
	}
	if b := r.Header.Get("X-Gatekeeper-Budget"); b != "" {
		// Budgets change only through config or the admin API.
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "ignored agent-supplied budget header", slog.String("tenant", req.tenant.Name))
	}
	t := &turn{s: s, req: req, pr: pr, body: body, started: s.now(), ctx: r.Context(), log: s.log}
	if err := t.admit(r.Context(), r); err != nil {
		writeError(w, req.api, err)
		return
	}
	t.log = s.log.With(slog.String("trajectory", t.recID), slog.String("tenant", req.tenant.Name),
		slog.String("model", pr.Model), slog.String("api", string(req.api)))
	w.Header().Set("X-Gatekeeper-Trajectory", t.recID)

	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	ctx := context.WithValue(r.Context(), ctxKey{}, &reqState{req: req, turn: t})
	defer func() {
		// A panic out of the copy (http.ErrAbortHandler) must still record the turn.
		if v := recover(); v != nil {
			t.failed(fmt.Errorf("aborted: %v", v))
			panic(v)
		}
	}()
	req.up.rp.ServeHTTP(w, r.WithContext(ctx))
	t.failed(errors.New("reply not recorded")) // no-op when the reply was recorded
}

// admit finds the turn's thread record and moves it READY → CALLING_MODEL,
// accepting the tool results the request carries. A thread that already
// has a call in flight forks a sibling: a call is never blocked for that.
func (t *turn) admit(ctx context.Context, r *http.Request) error {
	s := t.s
	rid, err := rootID(r, t.req, t.pr)
	if err != nil {
		return err
	}
	root, err := s.ensureRoot(ctx, rid, t.req.tenant)
	if err != nil {
		return err
	}
	key, parentKey := threadKey(r, t.pr)
	parent := root
	if parentKey != "" {
		if p, err := s.store.Get(ctx, childID(root.ID, parentKey)); err == nil {
			parent = p
		}
	}
	// The root serves the first conversation that claims it; every other
	// conversation is a child record.
	candidate := childID(parent.ID, key)
	if parent == root && (root.Thread == key || root.Thread == "") {
		candidate = root.ID
	} else if err := s.ensureChild(ctx, parent, candidate, key); err != nil {
		return err
	}
	ids := make([]string, len(t.pr.ToolResults))
	for i, tr := range t.pr.ToolResults {
		ids[i] = tr.ID
	}
	rec, err := t.admitOn(ctx, parent, candidate, key, ids)
	if errors.Is(err, errOtherThread) && candidate == root.ID {
		// Another conversation claimed the root after it was read.
		candidate = childID(root.ID, key)
		if err := s.ensureChild(ctx, root, candidate, key); err != nil {
			return err
		}
		rec, err = t.admitOn(ctx, parent, candidate, key, ids)
	}
	if err != nil {
		return err
	}
	t.recID = rec.ID
	t.chain = s.ancestors(ctx, rec)
	return nil
}

// admitOn admits the turn on the thread record base, or on a sibling of
// it when base (and each earlier sibling) already has a call in flight.
func (t *turn) admitOn(ctx context.Context, parent *trajectory.Record, base, key string, ids []string) (*trajectory.Record, error) {
	candidate := base
	for n := 1; n <= maxSiblings; n++ {
		if n > 1 {
			// A sibling is a child of the busy thread's parent (of the
			// root when the busy thread is the root itself).
			candidate = siblingID(base, n)
			if err := t.s.ensureChild(ctx, parent, candidate, key); err != nil {
				return nil, err
			}
		}
		rec, err := t.s.store.Update(ctx, candidate, func(rec *trajectory.Record) ([]trajectory.Event, error) {
			return t.admitRecord(rec, key, ids)
		})
		if errors.Is(err, errBusy) {
			continue
		}
		return rec, err
	}
	return nil, &HTTPError{Code: http.StatusTooManyRequests, Type: "rate_limited", RetryAfter: 2 * time.Second,
		Msg: fmt.Sprintf("more than %d calls of one conversation are in flight; retry shortly", maxSiblings)}
}

// admitRecord is the admission step on one record, run inside the store's
// atomic update.
func (t *turn) admitRecord(rec *trajectory.Record, key string, ids []string) ([]trajectory.Event, error) {
	now := t.s.now()
	switch {
	case rec.State.Terminal():
		return nil, &HTTPError{Code: http.StatusForbidden, Type: errTrajectoryCanceled,
			Msg: fmt.Sprintf("trajectory %s has ended (%s %s); start a new trajectory to continue", rec.ID, rec.State, rec.ExitReason)}
	case rec.Thread != "" && rec.Thread != key:
		return nil, errOtherThread
	case rec.State == trajectory.CallingModel:
		return nil, errBusy
	case rec.State == trajectory.Paused:
		return nil, &HTTPError{Code: http.StatusServiceUnavailable, Type: errTrajectoryPaused, RetryAfter: 10 * time.Second,
			Msg: fmt.Sprintf("trajectory %s is paused by an operator; retry later", rec.ID)}
	case rec.State == trajectory.AwaitingApproval || rec.State == trajectory.Finalizing:
		return nil, errBusy
	}
	if rec.Thread == "" {
		rec.Thread = key
	}
	var evs []trajectory.Event
	check, ts, err := rec.AcceptToolResults(ids, now)
	if err != nil {
		return nil, err
	}
	evs = append(evs, trajectory.EventsFor(rec.ID, ts)...)
	if len(check.Accepted) > 0 || len(check.Unanswered) > 0 {
		evs = append(evs, eventWith(rec.ID, now, trajectory.EventToolResults, map[string]any{
			"accepted": check.Accepted, "unanswered": check.Unanswered}))
	}
	if len(check.Unknown) > 0 {
		// Results for calls that are not pending: late, repeated or forged.
		// They are dropped from accounting and kept for audit.
		evs = append(evs, eventWith(rec.ID, now, trajectory.EventToolResultUnknown, map[string]any{"ids": check.Unknown}))
	}
	ts, err = rec.BeginTurn(now)
	if err != nil {
		return nil, err
	}
	rec.Provider = t.req.up.cfg.Name
	rec.Model = t.pr.Model
	return append(evs, trajectory.EventsFor(rec.ID, ts)...), nil
}

func eventWith(id string, now time.Time, typ trajectory.EventType, data any) trajectory.Event {
	raw, _ := json.Marshal(data) // maps of strings and slices always marshal
	return trajectory.Event{At: now, Trajectory: id, Type: typ, Data: raw}
}

// ancestors lists rec's ancestors, nearest first.
func (s *Server) ancestors(ctx context.Context, rec *trajectory.Record) []string {
	var out []string
	for p := rec.ParentID; p != "" && len(out) < maxDepth; {
		out = append(out, p)
		pr, err := s.store.Get(ctx, p)
		if err != nil {
			break
		}
		p = pr.ParentID
	}
	return out
}

// outcome is what a finished turn reports to its record.
type outcome struct {
	stop      string
	calls     []trajectory.PendingCall
	usage     trajectory.Usage
	estimated bool
	status    int
	upstream  bool // the provider answered with an error status or could not be reached
	detail    string
}

// attach takes over the upstream reply: it labels it with the trajectory
// and tees its body through the decoder.
func (t *turn) attach(resp *http.Response) error {
	// The header set on the agent's response names the record; the
	// provider has no say in it.
	resp.Header.Del("X-Gatekeeper-Trajectory")
	ct := resp.Header.Get("Content-Type")
	switch {
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		resp.Body = &jsonBody{t: t, src: resp.Body, status: resp.StatusCode, limit: 1 << 20}
	case isEventStream(ct):
		dec, err := streaming.NewDecoder(t.req.api)
		if err != nil {
			return err
		}
		resp.Body = &sseBody{t: t, src: resp.Body, rd: streaming.NewReader(int(t.s.cfg.Limits.MaxEventBytes)), dec: dec,
			in: t.s.bufs.Get()}
	default:
		resp.Body = &jsonBody{t: t, src: resp.Body, status: resp.StatusCode, limit: t.s.cfg.Limits.MaxBodyBytes}
	}
	return nil
}

func isEventStream(ct string) bool {
	return len(ct) >= 17 && ct[:17] == "text/event-stream"
}

// failed records a turn that produced no reply the decoder saw. It is a
// no-op once the turn was recorded.
func (t *turn) failed(err error) {
	o := outcome{stop: "error", upstream: true, estimated: true, detail: err.Error()}
	if t.clientGone() {
		o.stop = "canceled"
	}
	o.usage.InputTokens = estimateTokens(int64(len(t.body)))
	t.finish(o)
}

// finish records the outcome once, with a context that outlives the agent:
// a turn whose client went away is still charged.
func (t *turn) finish(o outcome) {
	t.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(context.Background()), 10*time.Second)
		defer cancel()
		t.record(ctx, o)
	})
}

func (t *turn) record(ctx context.Context, o outcome) {
	s := t.s
	now := s.now()
	data := map[string]any{
		"stop": o.stop, "status": o.status, "model": t.pr.Model, "provider": t.req.up.cfg.Name,
		"duration_ms": now.Sub(t.started).Milliseconds(), "estimated": o.estimated,
		"usage": o.usage,
	}
	if len(o.calls) > 0 {
		calls := make([]map[string]string, len(o.calls))
		for i, c := range o.calls {
			calls[i] = map[string]string{"id": c.ID, "name": c.Name}
		}
		data["tool_calls"] = calls
	}
	if o.detail != "" {
		data["detail"] = o.detail
	}
	_, err := s.store.Update(ctx, t.recID, func(rec *trajectory.Record) ([]trajectory.Event, error) {
		var ts []trajectory.Transition
		var err error
		if o.upstream {
			// No reply from the model: the call is not a turn of the run.
			var tr trajectory.Transition
			tr, err = rec.Transition(trajectory.Ready, "upstream_error", now)
			ts = []trajectory.Transition{tr}
			rec.LastStopReason = o.stop
		} else {
			ts, err = rec.EndTurn(trajectory.TurnOutcome{StopReason: o.stop, ToolCalls: o.calls, Usage: o.usage,
				Estimated: o.estimated, ToolDeadline: s.cfg.Limits.ToolDeadline.Std()}, now)
		}
		if err != nil {
			return nil, err
		}
		typ := trajectory.EventTurn
		if o.upstream {
			typ = trajectory.EventUpstreamError
		}
		return append([]trajectory.Event{eventWith(rec.ID, now, typ, data)}, trajectory.EventsFor(rec.ID, ts)...), nil
	})
	var te *trajectory.TransitionError
	if errors.As(err, &te) {
		// The record moved on while the call was out (it cannot today:
		// nothing else changes a CALLING_MODEL record); keep the refusal
		// in the log rather than forcing the state.
		if aerr := s.store.AppendEvents(ctx, t.recID, te.Event(now)); aerr != nil {
			err = errors.Join(err, aerr)
		}
	}
	if err != nil {
		t.log.LogAttrs(ctx, slog.LevelError, "recording turn failed", slog.String("error", err.Error()))
		return
	}
	if o.upstream {
		return
	}
	for _, id := range t.chain {
		_, err := s.store.Update(ctx, id, func(rec *trajectory.Record) ([]trajectory.Event, error) {
			rec.AddSpend(o.usage, 0, o.estimated)
			rec.Spend.Turns++ // a descendant's model call is a turn of the whole run
			return nil, nil
		})
		if err != nil {
			t.log.LogAttrs(ctx, slog.LevelError, "rolling spend up failed", slog.String("ancestor", id), slog.String("error", err.Error()))
		}
	}
	t.log.LogAttrs(ctx, slog.LevelInfo, "turn", slog.String("stop", o.stop), slog.Int("status", o.status),
		slog.Int64("input_tokens", o.usage.InputTokens), slog.Int64("output_tokens", o.usage.OutputTokens),
		slog.Bool("estimated", o.estimated), slog.Int("tool_calls", len(o.calls)))
}

// outcomeOf turns a decoded reply into an outcome.
func (t *turn) outcomeOf(res *streaming.Result, status int, cause error) outcome {
	o := outcome{status: status, stop: string(res.StopReason())}
	switch {
	case cause != nil && t.clientGone():
		o.stop = "canceled"
		o.detail = "client went away"
	case cause != nil:
		o.stop = "error"
		o.detail = cause.Error()
	case res.Truncated:
		o.stop = "error"
		o.detail = "upstream stream ended without its terminal event"
	case o.stop == "":
		o.stop = "end_turn"
	}
	o.usage = trajectory.Usage{InputTokens: res.Usage.InputTokens, CachedInputTokens: res.Usage.CachedInputTokens,
		CacheWriteTokens: res.Usage.CacheWriteTokens, OutputTokens: res.Usage.OutputTokens}
	complete := cause == nil && !res.Truncated && len(res.Errors) == 0
	if cause != nil || res.Truncated || !res.UsageSeen {
		// Charged from what was seen: input from the request when the
		// provider reported none, output estimated from the streamed bytes.
		o.estimated = true
		if o.usage.InputTokens+o.usage.CachedInputTokens+o.usage.CacheWriteTokens == 0 {
			o.usage.InputTokens = estimateTokens(int64(len(t.body)))
		}
		if est := estimateTokens(res.OutputBytes); est > o.usage.OutputTokens {
			o.usage.OutputTokens = est
		}
	}
	if complete {
		for _, tc := range res.ClientToolCalls() {
			if tc.Complete && tc.Choice == 0 {
				o.calls = append(o.calls, trajectory.PendingCall{ID: tc.ID, Name: tc.Name})
			}
		}
	}
	return o
}

// estimateTokens is the usual four bytes a token.
func estimateTokens(n int64) int64 { return (n + 3) / 4 }

func (t *turn) clientGone() bool { return t.ctx.Err() != nil }
