package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"gatekeeper/proxy/internal/admit"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/passthrough"
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

// passThrough forwards an allowed non-turn request with the key swapped,
// after the same checks as a turn: the virtual key (already), the run it
// names (ended, paused or killed: refused), the body limit and deadline,
// and the rate-limit scheduler (one request, no tokens). It is logged, not
// metered.
func (s *Server) passThrough(w http.ResponseWriter, r *http.Request, req *request) {
	up := req.up
	if !up.passes(r.Method, req.rest) {
		w.Header().Set("Connection", "close")
		apierr.Write(w, up.api, apierr.New(http.StatusNotFound, apierr.NotFound, fmt.Sprintf(
			"gatekeeper does not forward %s %s to provider %s: it is not a turn and not on the pass-through allowlist; "+
				"an operator can allow it in providers[].passthrough (allowed pass-through is forwarded unmetered)",
			r.Method, req.rest, up.cfg.Name)))
		return
	}
	if err := s.checkPassRun(r, req); err != nil {
		w.Header().Set("Connection", "close")
		apierr.Write(w, up.api, err)
		return
	}
	body, err := wire.ReadBody(w, r, s.cfg.Limits.MaxBodyBytes, s.cfg.Limits.BodyTimeout.Std())
	if err != nil {
		apierr.Write(w, up.api, err)
		return
	}
	wire.SetBody(r, body)
	pc := s.sched.Turn(up.pool, req.tenant.Priority)
	if err := pc.AcquireOne(r.Context()); err != nil {
		apierr.Write(w, up.api, keyRefused(err))
		return
	}
	defer pc.Settle(context.WithoutCancel(r.Context()), ratelimit.Cost{Requests: 1})
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "pass-through", slog.String("request_id", req.id),
		slog.String("provider", up.cfg.Name), slog.String("method", r.Method),
		slog.String("path", req.rest), slog.String("tenant", req.tenant.Name))
	ctx := passthrough.With(r.Context(), &passthrough.Request{Path: req.rest, Keys: pc})
	up.rp.ServeHTTP(w, r.WithContext(ctx))
}

// checkPassRun refuses a pass-through request of a run of its tenant that
// has ended, is paused (or about to pause), as a turn of it would be
// (passthrough.Blocking). The run is the one the path, the
// X-Gatekeeper-Trajectory header or the client's session header names. A
// request naming no run has nothing to check.
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
	rec, err := passthrough.Blocking(r.Context(), s.store, id, req.tenant.Name, r.Header)
	switch {
	case err != nil:
		return storeErr(err)
	case rec == nil:
		return nil
	case rec.State.Terminal():
		return admitted(admit.Ended(rec))
	}
	return &apierr.Error{Code: http.StatusServiceUnavailable, Type: apierr.TrajectoryPaused, RetryAfter: 30 * time.Second,
		Msg: fmt.Sprintf("trajectory %s is paused by an operator; retry later", trajectory.Unscoped(rec.ID, rec.Tenant))}
}

// passErr is err in the agent's error form: a *passthrough.Error becomes
// the upstream_error it describes, passthrough.ErrClientGone the bare 499
// of apierr.ErrClientGone; any other error is returned as it is.
func passErr(err error) error {
	var pe *passthrough.Error
	switch {
	case errors.Is(err, passthrough.ErrClientGone):
		return apierr.ErrClientGone
	case errors.As(err, &pe):
		return &apierr.Error{Code: pe.Status, Type: apierr.Upstream, RetryAfter: pe.RetryAfter, Msg: pe.Msg, Err: pe.Err}
	}
	return err
}
