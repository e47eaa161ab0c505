package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"gatekeeper/proxy/internal/threadid"
	"gatekeeper/proxy/internal/wire"
	"gatekeeper/ratelimit"
	"gatekeeper/trajectory"
)

// passes reports whether method and the canonical path p may pass
// through to up.
func (up *upstream) passes(method, p string) bool { return wire.Passes(up.pass, method, p) }

// allowsBackground reports whether a background response may be started:
// only when its output can be fetched, that is when pass-through of the
// retrieval of a stored response is allowed.
func (up *upstream) allowsBackground() bool {
	return up.passes(http.MethodGet, wire.RetrievalPath)
}

// passCall is a pass-through request's state for the reverse proxy's hooks.
type passCall struct {
	grant  *ratelimit.Grant // the key it goes on; nil when the pool has no limits
	header atomic.Pointer[http.Header]
}

// passThrough forwards an allowed non-turn request with the key swapped,
// after the same checks as a turn: the virtual key (already), the run it
// names (ended, paused or killed: refused), the body limit and deadline,
// and the rate-limit scheduler (one request, no tokens). It is logged, not
// metered.
func (s *Server) passThrough(w http.ResponseWriter, r *http.Request, req *request) {
	up := req.up
	if !up.passes(r.Method, req.rest) {
		w.Header().Set("Connection", "close")
		writeError(w, up.api, httpErr(http.StatusNotFound, errNotFound, fmt.Sprintf(
			"gatekeeper does not forward %s %s to provider %s: it is not a turn and not on the pass-through allowlist; "+
				"an operator can allow it in providers[].passthrough (allowed pass-through is forwarded unmetered)",
			r.Method, req.rest, up.cfg.Name)))
		return
	}
	if err := s.checkPassRun(r, req); err != nil {
		w.Header().Set("Connection", "close")
		writeError(w, up.api, err)
		return
	}
	body, err := readBody(w, r, s.cfg.Limits.MaxBodyBytes, s.cfg.Limits.BodyTimeout.Std())
	if err != nil {
		writeError(w, up.api, err)
		return
	}
	wire.SetBody(r, body)
	pc := &passCall{}
	if s.sched != nil && up.pool.limited {
		g, err := s.sched.Acquire(r.Context(), req.tenant.Priority, up.pool.keys, ratelimit.Cost{Requests: 1})
		if err != nil {
			writeError(w, up.api, s.passWaitError(r.Context(), up, req.tenant.Priority, err))
			return
		}
		pc.grant = g
		defer func() {
			var h http.Header
			if p := pc.header.Load(); p != nil {
				h = *p
			}
			g.Settle(context.WithoutCancel(r.Context()), ratelimit.Cost{Requests: 1}, h)
		}()
	}
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "pass-through", slog.String("request_id", req.id),
		slog.String("provider", up.cfg.Name), slog.String("method", r.Method),
		slog.String("path", req.rest), slog.String("tenant", req.tenant.Name))
	ctx := context.WithValue(r.Context(), ctxKey{}, &reqState{req: req, pass: pc})
	up.rp.ServeHTTP(w, r.WithContext(ctx))
}

// passWaitError is the answer to a pass-through request that got no key
// capacity.
func (s *Server) passWaitError(ctx context.Context, up *upstream, class string, err error) error {
	var we *ratelimit.WaitError
	switch {
	case errors.As(err, &we):
		s.tel.RateLimited(class)
		return &HTTPError{Code: http.StatusTooManyRequests, Type: errRateLimited, RetryAfter: max(we.RetryAfter, time.Second),
			Msg: fmt.Sprintf("provider %s has no key capacity for this request; retry after the Retry-After delay", up.cfg.Name), Err: err}
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return &HTTPError{Code: http.StatusServiceUnavailable, Type: errUpstream, RetryAfter: 5 * time.Second,
		Msg: "gatekeeper could not check provider " + up.cfg.Name + "'s rate limits; retry later", Err: err}
}

// checkPassRun refuses a pass-through request of a run of its tenant that
// has ended, is paused (or about to pause), as a turn of it would be. The
// run is the one the path, the X-Gatekeeper-Trajectory header or the
// client's session header names; when the request carries a subagent's id
// (X-Claude-Code-Agent-Id), its thread record under that run, as a turn
// finds it. That record and each of its ancestors are checked, so that a
// subagent stopped by an operator, or whose run was, passes no more than
// its turns do. A request naming no run, or a run not created yet, has
// nothing to check; another tenant's run of the same name is nothing of
// this tenant's.
func (s *Server) checkPassRun(r *http.Request, req *request) error {
	id := req.trajectoryID
	if id == "" {
		var err error
		if id, err = headerRootID(r, req); err != nil || id == "" {
			return err
		}
	}
	id, err := s.records.Scoped(r.Context(), id, req.tenant.Name)
	if err != nil {
		return admitted(err)
	}
	if thread := s.passThread(r, id); thread != "" {
		id = thread
	}
	for depth := 0; id != "" && depth < trajectory.MaxDepth; depth++ {
		rec, err := s.store.Get(r.Context(), id)
		switch {
		case errors.Is(err, trajectory.ErrNotFound) && depth == 0:
			return nil
		case err != nil:
			return storeErr(err)
		case rec.Tenant != req.tenant.Name:
			return nil
		case rec.State.Terminal():
			return endedError(rec)
		case rec.State == trajectory.Paused || rec.Pending.Control != nil && rec.Pending.Control.Kind == trajectory.ControlPause:
			return &HTTPError{Code: http.StatusServiceUnavailable, Type: errTrajectoryPaused, RetryAfter: 30 * time.Second,
				Msg: fmt.Sprintf("trajectory %s is paused by an operator; retry later", trajectory.Unscoped(rec.ID, rec.Tenant))}
		}
		id = rec.ParentID
	}
	return nil
}

// passThread returns the thread record of root that a turn carrying the
// same subagent headers would use, "" when the request names no subagent
// or the record does not exist (nothing ran there yet). The thread of a
// request without them is told by its conversation, which a pass-through
// request has not: the run itself is checked.
func (s *Server) passThread(r *http.Request, root string) string {
	agent := r.Header.Get("X-Claude-Code-Agent-Id")
	if agent == "" {
		return ""
	}
	parent := root
	if pid := r.Header.Get("X-Claude-Code-Parent-Agent-Id"); pid != "" {
		if p := threadid.Child(root, "agent:"+pid); s.exists(r.Context(), p) {
			parent = p
		}
	}
	id := threadid.Child(parent, "agent:"+agent)
	if !s.exists(r.Context(), id) {
		return ""
	}
	return id
}

// exists reports whether a record exists; a store failure counts as a
// record that does (the walk that follows reports the failure).
func (s *Server) exists(ctx context.Context, id string) bool {
	_, err := s.store.Get(ctx, id)
	return !errors.Is(err, trajectory.ErrNotFound)
}
