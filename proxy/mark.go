package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"strings"

	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/trajectory"
)

// The headers an agent's harness marks its run with. Like every
// X-Gatekeeper-* header they are never forwarded (wire.StripAgentHeaders).
const (
	headerTaskClass = "X-Gatekeeper-Task-Class"
	headerOutcome   = "X-Gatekeeper-Outcome"
)

// readMark reads the outcome headers of a request: each at most once, the
// outcome "accepted" or "rejected", the class a short token. A bad value
// is refused before the turn is admitted, so nothing is charged for it.
func readMark(h http.Header) (trajectory.Mark, error) {
	var m trajectory.Mark
	for _, f := range []struct {
		name  string
		parse func(string) (string, error)
		into  *string
	}{
		{headerOutcome, trajectory.ParseOutcome, &m.Outcome},
		{headerTaskClass, trajectory.ParseTaskClass, &m.TaskClass},
	} {
		vs := h.Values(f.name)
		switch {
		case len(vs) == 0:
			continue
		case len(vs) > 1:
			return trajectory.Mark{}, apierr.New(http.StatusBadRequest, apierr.InvalidRequest, f.name+" was sent more than once; send it once")
		}
		v, err := f.parse(vs[0])
		if err != nil {
			return trajectory.Mark{}, apierr.New(http.StatusBadRequest, apierr.InvalidRequest,
				f.name+": "+strings.TrimPrefix(err.Error(), "trajectory: invalid outcome: "))
		}
		*f.into = v
	}
	return m, nil
}

// recordMark saves a harness's mark on the run the turn belongs to: the
// root of its thread's record, since an outcome judges the whole run. The
// turn goes on if the store fails; the mark is logged as lost, and the
// harness or an operator can send it again.
func (t *turn) recordMark(ctx context.Context, m trajectory.Mark) {
	root, _, _ := strings.Cut(t.recID, "/")
	now := t.s.now()
	_, err := t.s.store.Update(context.WithoutCancel(ctx), root, func(rec *trajectory.Record) ([]trajectory.Event, error) {
		return rec.ApplyMark(m, "harness", "header", now), nil
	})
	if err != nil {
		t.log.LogAttrs(ctx, slog.LevelError, "outcome headers not recorded", slog.String("run", root),
			slog.String("outcome", m.Outcome), slog.String("task_class", m.TaskClass), slog.String("error", err.Error()))
	}
}
