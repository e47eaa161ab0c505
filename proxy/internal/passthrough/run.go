package passthrough

import (
	"context"
	"errors"
	"net/http"

	"gatekeeper/proxy/internal/threadid"
	"gatekeeper/trajectory"
)

// Blocking returns the record that refuses a pass-through request of
// tenant on run root, as a turn of it would be refused: one that has
// ended, or is paused (or about to pause); nil when none does. When the
// request's headers h carry a subagent's id (X-Claude-Code-Agent-Id),
// the walk starts at its thread record under root, as a turn finds it.
// That record and each of its ancestors are checked, so that a subagent
// stopped by an operator, or whose run was, passes no more than its turns
// do. A run not created yet has nothing to check; another tenant's run
// of the same name is nothing of this tenant's. A store failure is
// returned as it came.
func Blocking(ctx context.Context, store trajectory.Store, root, tenant string, h http.Header) (*trajectory.Record, error) {
	id := root
	if thread := threadOf(ctx, store, root, h); thread != "" {
		id = thread
	}
	for depth := 0; id != "" && depth < trajectory.MaxDepth; depth++ {
		rec, err := store.Get(ctx, id)
		switch {
		case errors.Is(err, trajectory.ErrNotFound) && depth == 0:
			return nil, nil
		case err != nil:
			return nil, err
		case rec.Tenant != tenant:
			return nil, nil
		case rec.State.Terminal(),
			rec.State == trajectory.Paused || rec.Pending.Control != nil && rec.Pending.Control.Kind == trajectory.ControlPause:
			return rec, nil
		}
		id = rec.ParentID
	}
	return nil, nil
}

// threadOf returns the thread record of root that a turn carrying the
// same subagent headers would use, "" when the request names no subagent
// or the record does not exist (nothing ran there yet). The thread of a
// request without them is told by its conversation, which a pass-through
// request has not: the run itself is checked.
func threadOf(ctx context.Context, store trajectory.Store, root string, h http.Header) string {
	agent := h.Get("X-Claude-Code-Agent-Id")
	if agent == "" {
		return ""
	}
	parent := root
	if pid := h.Get("X-Claude-Code-Parent-Agent-Id"); pid != "" {
		if p := threadid.Child(root, "agent:"+pid); exists(ctx, store, p) {
			parent = p
		}
	}
	id := threadid.Child(parent, "agent:"+agent)
	if !exists(ctx, store, id) {
		return ""
	}
	return id
}

// exists reports whether a record exists; a store failure counts as a
// record that does (the walk that follows reports the failure).
func exists(ctx context.Context, store trajectory.Store, id string) bool {
	_, err := store.Get(ctx, id)
	return !errors.Is(err, trajectory.ErrNotFound)
}
