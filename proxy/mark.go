package proxy

import (
	"context"
	"log/slog"
	"strings"

	"gatekeeper/trajectory"
)

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
