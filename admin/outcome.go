package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"gatekeeper/trajectory"
)

// maxOutcomeBodySize bounds the body of an outcome mark.
const maxOutcomeBodySize = 4 << 10

// postTrajectory serves POST /admin/v1/trajectories/{id}/{verb}: the
// outcome mark, or a control request.
func (a *API) postTrajectory(w http.ResponseWriter, r *http.Request, c caller) error {
	if rest, ok := strings.CutSuffix(chi.URLParam(r, "*"), "/outcome"); ok {
		return a.markOutcome(w, r, c, rest)
	}
	return a.control(w, r, c)
}

// outcomeRequest is the body of POST .../{id}/outcome.
type outcomeRequest struct {
	Accepted  *bool  `json:"accepted"`
	TaskClass string `json:"task_class"`
}

const outcomeUsage = `body must be {"accepted": true|false, "task_class"?}`

// parseOutcome reads the body of an outcome mark: one JSON object, with
// accepted a JSON boolean and task_class, when present, a class token.
func parseOutcome(b []byte) (trajectory.Mark, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var req outcomeRequest
	if err := dec.Decode(&req); err != nil {
		return trajectory.Mark{}, badRequest(outcomeUsage + ": " + err.Error())
	}
	if dec.Decode(&struct{}{}) != io.EOF {
		return trajectory.Mark{}, badRequest(outcomeUsage + ": one JSON object only")
	}
	if req.Accepted == nil {
		return trajectory.Mark{}, badRequest(outcomeUsage + ": accepted is required")
	}
	m := trajectory.Mark{Outcome: trajectory.OutcomeRejected}
	if *req.Accepted {
		m.Outcome = trajectory.OutcomeAccepted
	}
	if req.TaskClass != "" {
		c, err := trajectory.ParseTaskClass(req.TaskClass)
		if err != nil {
			return trajectory.Mark{}, badRequest(strings.TrimPrefix(err.Error(), "trajectory: invalid outcome: "))
		}
		m.TaskClass = c
	}
	return m, nil
}

// markOutcome serves POST /admin/v1/trajectories/{id}/outcome: it records
// whether the run's work was accepted, and of which task class, on the
// record with an outcome event, live or finished. An outcome belongs to
// a run, so a subagent's id is refused with the id of its run.
func (a *API) markOutcome(w http.ResponseWriter, r *http.Request, c caller, raw string) error {
	id, err := url.PathUnescape(raw)
	if err != nil || id == "" {
		return badRequest("missing trajectory id")
	}
	if id, err = a.resolve(r.Context(), c, id, r.URL.Query().Get("tenant")); err != nil {
		return err
	}
	if root, _, child := strings.Cut(id, "/"); child {
		return badRequest("an outcome is marked on a run, not on one of its subagents: use " + strconv.Quote(root))
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxOutcomeBodySize))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return badRequest(outcomeUsage + ": body too large")
		}
		return badRequest(outcomeUsage + ": " + err.Error())
	}
	m, err := parseOutcome(b)
	if err != nil {
		return err
	}
	now := a.now()
	rec, err := a.store.Update(r.Context(), id, func(rec *trajectory.Record) ([]trajectory.Event, error) {
		return rec.ApplyMark(m, c.name, "admin", now), nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rec)
	return nil
}
