package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/trajectory"
)

// Limits on a control request.
const (
	maxControlBodySize = 64 << 10
	maxInterruptSize   = 32 << 10 // bytes of an interrupt's message
	maxReasonSize      = 1 << 10
	// maxCascade bounds the descendants one request walks: a tree is
	// nested at most trajectory.MaxDepth deep but may be wide.
	maxCascade = 10_000
)

// controlRequest is the body of POST .../{id}/{verb}: empty or an object.
type controlRequest struct {
	Message string `json:"message"`
	Reason  string `json:"reason"`
}

// controlEvent is the Data of the control event each record of the
// subtree gets.
type controlEvent struct {
	Kind    trajectory.ControlKind `json:"kind"`
	By      string                 `json:"by"`
	Message string                 `json:"message,omitempty"`
	Reason  string                 `json:"reason,omitempty"`
	// Applied: the request took effect on arrival (a state change, or a
	// pending pause withdrawn by resume). Pending: it waits, as the
	// record's pending control, for the next turn boundary. Neither: there
	// was nothing to do, or a pending control that ranks higher stays.
	Applied bool `json:"applied"`
	Pending bool `json:"pending"`
	// Target is the record the operator named, on its descendants' events.
	Target string `json:"target,omitempty"`
}

// inDoubtEvent is the Data of a tool_calls_in_doubt event.
type inDoubtEvent struct {
	Calls []inDoubtCall `json:"calls"`
}

type inDoubtCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

func controlKind(verb string) (trajectory.ControlKind, bool) {
	switch k := trajectory.ControlKind(verb); k {
	case trajectory.ControlPause, trajectory.ControlResume, trajectory.ControlCancel,
		trajectory.ControlKill, trajectory.ControlFinish, trajectory.ControlInterrupt:
		return k, true
	}
	return "", false
}

// control serves POST /admin/v1/trajectories/{id}/{verb}. The request is
// recorded on every live descendant of the target, breadth first, and on
// the target last: a descendant the store fails to update aborts the call
// before the target changes, so the operator can send the same request
// again (the descendants it reached take it as a repeat, or skip it as
// finished) instead of meeting a 409 on a target already stopped.
func (a *API) control(w http.ResponseWriter, r *http.Request, c caller) error {
	rest := chi.URLParam(r, "*")
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return &Error{Code: http.StatusNotFound, Type: "not_found_error", Msg: "POST needs /admin/v1/trajectories/{id}/{pause|resume|cancel|kill|finish|interrupt}"}
	}
	kind, ok := controlKind(rest[i+1:])
	if !ok {
		return &Error{Code: http.StatusNotFound, Type: "not_found_error", Msg: "unknown control " + strconv.Quote(rest[i+1:]) + ": use pause, resume, cancel, kill, finish or interrupt"}
	}
	id, err := url.PathUnescape(rest[:i])
	if err != nil || id == "" {
		return badRequest("missing trajectory id")
	}
	if id, err = a.resolve(r.Context(), c, id, r.URL.Query().Get("tenant")); err != nil {
		return err
	}
	req, err := readControl(w, r, kind)
	if err != nil {
		return err
	}
	ctx := r.Context()
	target, err := a.store.Get(ctx, id)
	if err != nil {
		return err
	}
	if target.State.Terminal() {
		return finished(target)
	}
	now := a.now()
	ctl := trajectory.Control{Kind: kind, Message: req.Message, By: c.name, At: now}
	var changed []string
	queue := target.Children
	walked := 0
	for len(queue) > 0 && walked < maxCascade {
		next := queue[0]
		queue = queue[1:]
		walked++
		rec, children, ok, err := a.apply(ctx, next, ctl, req.Reason, id, now)
		switch {
		case errors.Is(err, trajectory.ErrTerminal), errors.Is(err, trajectory.ErrNotFound):
			// Finished (or gone) before the request: nothing to stop
			// there, but its own descendants may still be live.
		case err != nil:
			return fmt.Errorf("%s on %q, descendant of %q: %w", kind, next, id, err)
		case ok:
			changed = append(changed, rec.ID)
		}
		queue = append(queue, children...)
	}
	if len(queue) > 0 {
		a.log.LogAttrs(ctx, slog.LevelWarn, "control request reached only part of a trajectory's subtree",
			slog.String("trajectory", id), slog.String("kind", string(kind)), slog.Int("descendants", maxCascade), slog.Int("left", len(queue)))
	}
	rec, _, ok, err := a.apply(ctx, id, ctl, req.Reason, "", now)
	switch {
	case errors.Is(err, trajectory.ErrTerminal):
		// Finished while the descendants were being updated.
		cur, gerr := a.store.Get(ctx, id)
		if gerr != nil {
			return gerr
		}
		return finished(cur)
	case err != nil:
		return err
	case ok:
		changed = append(changed, rec.ID)
	}
	a.publish(ctx, changed, kind)
	if kind == trajectory.ControlCancel || kind == trajectory.ControlKill || kind == trajectory.ControlFinish {
		a.withdrawPending(ctx, changed, kind, c.name)
	}
	writeJSON(w, http.StatusAccepted, rec)
	return nil
}

// readControl reads and checks a control request's body.
func readControl(w http.ResponseWriter, r *http.Request, kind trajectory.ControlKind) (controlRequest, error) {
	usage := `body must be empty or {"reason"?}`
	if kind == trajectory.ControlInterrupt {
		usage = `body must be {"message", "reason"?}`
	}
	var req controlRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxControlBodySize))
	dec.DisallowUnknownFields()
	switch err := dec.Decode(&req); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return req, badRequest(usage + ": " + err.Error())
	default:
		if dec.Decode(&struct{}{}) != io.EOF {
			return req, badRequest(usage + ": one JSON object only")
		}
	}
	switch {
	case kind == trajectory.ControlInterrupt && strings.TrimSpace(req.Message) == "":
		return req, badRequest(usage + ": the message is the text the agent gets as a user message and cannot be empty")
	case len(req.Message) > maxInterruptSize:
		return req, badRequest(fmt.Sprintf("message is %d bytes; at most %d", len(req.Message), maxInterruptSize))
	case kind != trajectory.ControlInterrupt && req.Message != "":
		return req, badRequest(usage + ": only interrupt takes a message")
	case len(req.Reason) > maxReasonSize:
		return req, badRequest(fmt.Sprintf("reason is %d bytes; at most %d", len(req.Reason), maxReasonSize))
	}
	return req, nil
}

// apply records ctl on one record in one store update: the control event,
// the transitions it made, and the tool calls it left in doubt. target is
// the record the operator named when id is one of its descendants. It
// returns the saved record, the record's children (also when the record
// was finished and nothing was saved, so the walk goes on below it), and
// whether the record changed. An error matching trajectory.ErrTerminal
// means the record had finished.
func (a *API) apply(ctx context.Context, id string, ctl trajectory.Control, reason, target string, now time.Time) (*trajectory.Record, []string, bool, error) {
	var children []string
	var changed bool
	var moves []trajectory.Transition
	rec, err := a.store.Update(ctx, id, func(rec *trajectory.Record) ([]trajectory.Event, error) {
		children = rec.Children
		var before *trajectory.Control
		if rec.Pending.Control != nil {
			c := *rec.Pending.Control
			before = &c
		}
		ts, doubt, err := rec.RequestControl(ctl, now)
		if err != nil {
			return nil, err
		}
		moves = ts
		after := rec.Pending.Control
		d := controlEvent{Kind: ctl.Kind, By: ctl.By, Message: ctl.Message, Reason: reason, Target: target,
			Applied: len(ts) > 0 || (before != nil && after == nil),
			Pending: after != nil && *after == ctl}
		changed = d.Applied || d.Pending
		data, err := json.Marshal(d)
		if err != nil {
			return nil, err
		}
		evs := []trajectory.Event{{At: now, Trajectory: rec.ID, Type: trajectory.EventControl, Data: data}}
		evs = append(evs, trajectory.EventsFor(rec.ID, ts)...)
		if len(doubt) > 0 {
			calls := make([]inDoubtCall, len(doubt))
			for i, pc := range doubt {
				calls[i] = inDoubtCall{ID: pc.ID, Name: pc.Name}
			}
			data, err := json.Marshal(inDoubtEvent{Calls: calls})
			if err != nil {
				return nil, err
			}
			evs = append(evs, trajectory.Event{At: now, Trajectory: rec.ID, Type: trajectory.EventToolCallsInDoubt,
				Reason: string(ctl.Kind), Data: data})
		}
		return evs, nil
	})
	if err == nil && a.states != nil {
		for _, m := range moves {
			a.states.StateChanged(rec.Tenant, string(m.From), string(m.To))
		}
	}
	return rec, children, changed, err
}

// publish signals every changed record. A lost signal only delays the
// control to the end of the call in flight, so failures are logged, not
// returned: the request itself is recorded.
func (a *API) publish(ctx context.Context, ids []string, kind trajectory.ControlKind) {
	if a.signals == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	for _, id := range ids {
		if err := a.signals.Publish(ctx, trajectory.Signal{ID: id, Kind: kind}); err != nil {
			a.log.LogAttrs(ctx, slog.LevelWarn, "control signal not published",
				slog.String("trajectory", id), slog.String("kind", string(kind)), slog.String("error", err.Error()))
		}
	}
}

func finished(rec *trajectory.Record) error {
	how := string(rec.State)
	if rec.ExitReason != "" {
		how += ", " + rec.ExitReason
	}
	return &Error{Code: http.StatusConflict, Type: "conflict_error",
		Msg: fmt.Sprintf("trajectory %q has already finished (%s)", rec.ID, how)}
}
