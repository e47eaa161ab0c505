package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/meter"
	"gatekeeper/trajectory"
)

// budgetRequest is the body of PATCH /admin/v1/trajectories/{id}/budget:
// the dimensions to change (0: no ceiling); one left out keeps its value.
type budgetRequest struct {
	Turns      *int64   `json:"turns"`
	Tokens     *int64   `json:"tokens"`
	WallClockS *int64   `json:"wall_clock_s"`
	Dollars    *float64 `json:"dollars"`
	OnExhaust  *string  `json:"on_exhaust"`
	Reason     string   `json:"reason"`
}

// budgetEvent is the Data of the budget event a change writes.
type budgetEvent struct {
	By      string            `json:"by"`
	From    trajectory.Budget `json:"from"`
	To      trajectory.Budget `json:"to"`
	Reason  string            `json:"reason,omitempty"`
	Resumed bool              `json:"resumed"` // the change ended a pause for the budget
}

// errBudgetEnded aborts a budget change on a record that finished while
// it was read.
var errBudgetEnded = errors.New("admin: trajectory has ended")

// patchBudget serves PATCH /admin/v1/trajectories/{id}/budget. It changes
// the record's budget, writes a budget event and reads the record's stage
// again. A run its budget paused (on_exhaust: pause) goes back to READY
// once the new budget is no longer at its halt stage, and so do the
// records under it that their budget paused: their next call is checked
// against the new ceilings, and pauses them again if they still cannot
// pay for it. A finished run is never revived: 409.
func (a *API) patchBudget(w http.ResponseWriter, r *http.Request, c caller) error {
	rest := chi.URLParam(r, "*")
	raw, ok := strings.CutSuffix(rest, "/budget")
	if !ok {
		return &Error{Code: http.StatusNotFound, Type: "not_found_error", Msg: "PATCH needs /admin/v1/trajectories/{id}/budget"}
	}
	id, err := url.PathUnescape(raw)
	if err != nil || id == "" {
		return badRequest("missing trajectory id")
	}
	if id, err = a.resolve(r.Context(), c, id, r.URL.Query().Get("tenant")); err != nil {
		return err
	}
	req, err := readBudget(w, r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	now := a.now()
	th := meter.Thresholds(a.config().Stages)
	var resumed bool
	var moves []trajectory.Transition
	rec, err := a.store.Update(ctx, id, func(rec *trajectory.Record) ([]trajectory.Event, error) {
		if rec.State.Terminal() || rec.State == trajectory.Finalizing {
			return nil, errBudgetEnded
		}
		from := rec.Budget
		req.apply(&rec.Budget)
		evs := restage(rec, th, now)
		resumed, moves = false, nil
		if rec.State == trajectory.Paused && rec.PauseReason == trajectory.PauseBudget && rec.Stage != string(meter.Halt) {
			tr, err := rec.Transition(trajectory.Ready, "budget raised", now)
			if err != nil {
				return nil, err
			}
			resumed, moves = true, []trajectory.Transition{tr}
		}
		data, err := json.Marshal(budgetEvent{By: c.name, From: from, To: rec.Budget, Reason: req.Reason, Resumed: resumed})
		if err != nil {
			return nil, err
		}
		evs = append([]trajectory.Event{{At: now, Trajectory: rec.ID, Type: trajectory.EventBudget, Data: data}}, evs...)
		return append(evs, trajectory.EventsFor(rec.ID, moves)...), nil
	})
	if errors.Is(err, errBudgetEnded) {
		cur, gerr := a.store.Get(ctx, id)
		if gerr != nil {
			return gerr
		}
		return finished(cur)
	}
	if err != nil {
		return err
	}
	a.observe(rec, moves)
	changed := []string{}
	if resumed {
		changed = append(changed, rec.ID)
	}
	if rec.Stage != string(meter.Halt) {
		changed = append(changed, a.resumeBudgetPaused(r, rec.Children, now)...)
	}
	a.publish(ctx, changed, trajectory.ControlResume)
	writeJSON(w, http.StatusOK, rec)
	return nil
}

// resumeBudgetPaused moves every record below a raised budget that its
// budget paused back to READY, and returns their ids.
func (a *API) resumeBudgetPaused(r *http.Request, queue []string, now time.Time) []string {
	ctx := r.Context()
	var ids []string
	for walked := 0; len(queue) > 0 && walked < maxCascade; walked++ {
		next := queue[0]
		queue = queue[1:]
		var moves []trajectory.Transition
		rec, err := a.store.Update(ctx, next, func(rec *trajectory.Record) ([]trajectory.Event, error) {
			moves = nil
			if rec.State != trajectory.Paused || rec.PauseReason != trajectory.PauseBudget {
				return nil, nil
			}
			tr, err := rec.Transition(trajectory.Ready, "budget raised", now)
			if err != nil {
				return nil, err
			}
			moves = []trajectory.Transition{tr}
			return trajectory.EventsFor(rec.ID, moves), nil
		})
		if err != nil {
			// The raise itself is recorded; a record left paused is
			// resumed by an operator's resume.
			a.log.LogAttrs(ctx, slog.LevelWarn, "budget-paused record not resumed", slog.String("trajectory", next), slog.String("error", err.Error()))
			continue
		}
		if len(moves) > 0 {
			ids = append(ids, rec.ID)
			a.observe(rec, moves)
		}
		queue = append(queue, rec.Children...)
	}
	return ids
}

func (a *API) observe(rec *trajectory.Record, moves []trajectory.Transition) {
	if a.states == nil {
		return
	}
	for _, m := range moves {
		a.states.StateChanged(rec.Tenant, string(m.From), string(m.To))
	}
}

// restage reads a record's budget stage again from its own budget, its
// spend and the calls in flight under it, with an event when the stage
// changes. The proxy reads the whole chain at the record's next call.
func restage(rec *trajectory.Record, th meter.Thresholds, now time.Time) []trajectory.Event {
	u := meter.UsedOf(rec.Spend)
	u.WallClock = meter.Elapsed(rec.StartedAt, now, rec.Waited(now))
	d := meter.Check([]meter.Level{{ID: rec.ID, Budget: rec.Budget, Used: u,
		Reserved: meter.Reservation{Turns: rec.Reserved.Calls, Tokens: rec.Reserved.Tokens, Micros: rec.Reserved.Micros}}}, th)
	if d.Binding == "" {
		// No ceiling of its own left: its ancestors' bind.
		d.Stage = meter.Nominal
	}
	rec.BudgetUsed, rec.BindingDimension = d.Rho, string(d.Binding)
	if rec.Stage == string(d.Stage) {
		return nil
	}
	from := rec.Stage
	rec.Stage = string(d.Stage)
	data, _ := json.Marshal(map[string]any{"from": from, "to": d.Stage, "budget_used": d.Rho, "binding_dimension": d.Binding})
	return []trajectory.Event{{At: now, Trajectory: rec.ID, Type: trajectory.EventStage, Data: data}}
}

// readBudget reads and checks a budget change.
func readBudget(w http.ResponseWriter, r *http.Request) (budgetRequest, error) {
	const usage = `body must be {"turns"?, "tokens"?, "wall_clock_s"?, "dollars"?, "on_exhaust"?, "reason"?} with at least one budget field`
	var req budgetRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxControlBodySize))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, badRequest(usage + ": " + err.Error())
	}
	if dec.Decode(&struct{}{}) != io.EOF {
		return req, badRequest(usage + ": one JSON object only")
	}
	switch {
	case req.Turns == nil && req.Tokens == nil && req.WallClockS == nil && req.Dollars == nil && req.OnExhaust == nil:
		return req, badRequest(usage)
	case req.Turns != nil && *req.Turns < 0, req.Tokens != nil && *req.Tokens < 0, req.WallClockS != nil && *req.WallClockS < 0:
		return req, badRequest("budget values must be >= 0 (0 means no ceiling)")
	case req.Dollars != nil && (*req.Dollars < 0 || math.IsNaN(*req.Dollars) || math.IsInf(*req.Dollars, 0)):
		return req, badRequest("dollars must be a number >= 0 (0 means no ceiling)")
	case req.OnExhaust != nil && !trajectory.ValidOnExhaust(*req.OnExhaust):
		return req, badRequest(`on_exhaust must be "fail" or "pause"`)
	case len(req.Reason) > maxReasonSize:
		return req, badRequest(fmt.Sprintf("reason is %d bytes; at most %d", len(req.Reason), maxReasonSize))
	}
	return req, nil
}

// apply sets the dimensions the request names on b.
func (req budgetRequest) apply(b *trajectory.Budget) {
	if req.Turns != nil {
		b.Turns = *req.Turns
	}
	if req.Tokens != nil {
		b.Tokens = *req.Tokens
	}
	if req.WallClockS != nil {
		b.WallClockS = *req.WallClockS
	}
	if req.Dollars != nil {
		b.Dollars = *req.Dollars
	}
	if req.OnExhaust != nil {
		b.OnExhaust = *req.OnExhaust
	}
}
