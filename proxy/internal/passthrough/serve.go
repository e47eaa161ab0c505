package passthrough

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"time"

	"gatekeeper/config"
	"gatekeeper/proxy/internal/admit"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/keys"
	"gatekeeper/proxy/internal/wire"
	"gatekeeper/ratelimit"
	"gatekeeper/trajectory"
)

// Gate is what every provider's pass-through requests are checked
// against before they are forwarded.
type Gate struct {
	Store trajectory.Store
	// Scoped is the store id of the run a tenant names id
	// (admit.Records.Scoped).
	Scoped      func(ctx context.Context, id, tenant string) (string, error)
	MaxBody     int64         // limits.max_body_bytes
	BodyTimeout time.Duration // limits.body_timeout
	Logger      *slog.Logger
}

// Call is one pass-through request as routing classified it.
type Call struct {
	Provider string
	Allow    []config.Passthrough // the provider's allowlist (wire.Allowlist)
	Proxy    *httputil.ReverseProxy
	Path     string // the canonical escaped path below the provider prefix
	Run      string // the trajectory id of the path; "" when none
	Tenant   *config.Tenant
	KeyHash  [32]byte // of the virtual key
	ID       string   // the request id
	Keys     *keys.Turn
	Own      []string // the agent's own provider credentials, for a tenant with credentials: forward; else nil
}

// Serve forwards an allowed non-turn request with the key swapped (or,
// for a tenant that forwards its agents' credentials, with the agent's
// own), after the same checks as a turn: the virtual key (already), the
// run it names (ended, paused or killed: refused), the body limit and
// deadline, and the rate-limit scheduler (one request, no tokens; none
// for an agent's own credential). It is logged, not
// metered. A refusal is written by fail: an *apierr.Error, an
// *admit.Refusal, a *keys.Refusal or the context's error, for the caller
// to put in the agent's error form.
func (g *Gate) Serve(w http.ResponseWriter, r *http.Request, c Call, fail func(http.ResponseWriter, error)) {
	if !wire.Passes(c.Allow, r.Method, c.Path) {
		w.Header().Set("Connection", "close")
		fail(w, apierr.New(http.StatusNotFound, apierr.NotFound, fmt.Sprintf(
			"gatekeeper does not forward %s %s to provider %s: it is not a turn and not on the pass-through allowlist; "+
				"an operator can allow it in providers[].passthrough (allowed pass-through is forwarded unmetered)",
			r.Method, c.Path, c.Provider)))
		return
	}
	if err := g.checkRun(r, &c); err != nil {
		w.Header().Set("Connection", "close")
		fail(w, err)
		return
	}
	body, err := wire.ReadBody(w, r, g.MaxBody, g.BodyTimeout)
	if err != nil {
		fail(w, err)
		return
	}
	wire.SetBody(r, body)
	if err := c.Keys.AcquireOne(r.Context()); err != nil {
		fail(w, err)
		return
	}
	defer c.Keys.Settle(context.WithoutCancel(r.Context()), ratelimit.Cost{Requests: 1})
	g.Logger.LogAttrs(r.Context(), slog.LevelInfo, "pass-through", slog.String("request_id", c.ID),
		slog.String("provider", c.Provider), slog.String("method", r.Method),
		slog.String("path", c.Path), slog.String("tenant", c.Tenant.Name))
	ctx := With(r.Context(), &Request{Path: c.Path, Keys: c.Keys, Own: c.Own})
	c.Proxy.ServeHTTP(w, r.WithContext(ctx))
}

// checkRun refuses a pass-through request of a run of its tenant that
// has ended, is paused (or about to pause), as a turn of it would be
// (Blocking). The run is the one the path, the X-Gatekeeper-Trajectory
// header or the client's session header names. A request naming no run
// has nothing to check.
func (g *Gate) checkRun(r *http.Request, c *Call) error {
	id := c.Run
	if id == "" {
		var err error
		if id, err = wire.HeaderRun(r.Header, c.KeyHash); err != nil {
			return err
		}
		if id == "" {
			return nil
		}
	}
	id, err := g.Scoped(r.Context(), id, c.Tenant.Name)
	if err != nil {
		return err
	}
	rec, err := Blocking(r.Context(), g.Store, id, c.Tenant.Name, r.Header)
	switch {
	case err != nil:
		return &admit.Refusal{Kind: admit.Unavailable, Err: err}
	case rec == nil:
		return nil
	case rec.State.Terminal():
		return admit.Ended(rec)
	}
	return &apierr.Error{Code: http.StatusServiceUnavailable, Type: apierr.TrajectoryPaused, RetryAfter: 30 * time.Second,
		Msg: fmt.Sprintf("trajectory %s is paused by an operator; retry later", trajectory.Unscoped(rec.ID, rec.Tenant))}
}
