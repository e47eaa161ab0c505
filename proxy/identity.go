package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"gatekeeper/config"
	"gatekeeper/proxy/internal/threadid"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// rootID decides which trajectory a request belongs to, in order: path
// prefix, X-Gatekeeper-Trajectory, the client's own session id (scoped to
// the virtual key), and else one trajectory per virtual key and
// conversation.
func rootID(r *http.Request, req *request, pr *streaming.Request) (string, error) {
	if req.trajectoryID != "" {
		return req.trajectoryID, nil
	}
	if id, err := headerRootID(r, req); id != "" || err != nil {
		return id, err
	}
	return threadid.Implicit(req.keyHash, pr.SessionHint, pr.Fingerprint), nil
}

// headerRootID is the trajectory a request's headers name
// (threadid.FromHeaders); "" when they name none.
func headerRootID(r *http.Request, req *request) (string, error) {
	id, err := threadid.FromHeaders(r.Header, req.keyHash)
	if err != nil {
		return "", httpErr(http.StatusBadRequest, errInvalidRequest, err.Error())
	}
	return id, nil
}

// ensureRoot returns the root record, creating it with the tenant's
// defaults when it does not exist yet and the tenant may start a run. A
// root of another tenant is refused.
// named says whether the request named the run (path or
// X-Gatekeeper-Trajectory) rather than leaving it implicit.
func (s *Server) ensureRoot(ctx context.Context, id string, named bool, tenant *config.Tenant) (*trajectory.Record, error) {
	rec, err := s.store.Get(ctx, id)
	if errors.Is(err, trajectory.ErrNotFound) {
		if err := s.mayStart(ctx, tenant, id, named); err != nil {
			return nil, err
		}
		rec = s.newRecord(id, "", tenant)
		err = s.store.Create(ctx, rec, s.createdEvent(rec))
		if err != nil && !errors.Is(err, trajectory.ErrExists) {
			s.unstart(tenant, id)
		}
		if err == nil {
			s.tel.StateChanged(tenant.Name, "", string(rec.State))
		}
		if errors.Is(err, trajectory.ErrExists) {
			rec, err = s.store.Get(ctx, id)
		}
	}
	if err != nil {
		return nil, storeErr(err)
	}
	if rec.Tenant != tenant.Name {
		return nil, errOtherTenant
	}
	return rec, nil
}

// errOtherTenant: the id names another tenant's run. It never reaches the
// agent, which must not learn that the other run exists.
var errOtherTenant = errors.New("proxy: the id names another tenant's run")

// scopedRoot is the store id of the run a tenant names id: the plain id
// when it is the tenant's own or no one's yet, else the tenant's scoped
// one (trajectory.TenantScoped). Two tenants may so use the same name,
// each reaching its own run.
func (s *Server) scopedRoot(ctx context.Context, id, tenant string) (string, error) {
	scoped := trajectory.TenantScoped(id, tenant)
	_, err := s.store.Get(ctx, scoped)
	if err == nil {
		return scoped, nil
	}
	if !errors.Is(err, trajectory.ErrNotFound) {
		return "", storeErr(err)
	}
	rec, err := s.store.Get(ctx, id)
	switch {
	case errors.Is(err, trajectory.ErrNotFound):
		return id, nil
	case err != nil:
		return "", storeErr(err)
	case rec.Tenant != tenant:
		return scoped, nil
	}
	return id, nil
}

// childrenFull: a parent has limits.max_children children, so a new
// thread shares the last one.
type childrenFull struct {
	parent, last string
	max          int
}

func (e *childrenFull) Error() string {
	return fmt.Sprintf("proxy: %s has %d children", e.parent, e.max)
}

// ensureChild returns the child record id of parent for a thread key,
// creating it when missing, unless the parent has limits.max_children
// children (*childrenFull).
func (s *Server) ensureChild(ctx context.Context, parent, tenant, id, key string) error {
	_, err := s.store.Get(ctx, id)
	if err == nil {
		return nil
	}
	if !errors.Is(err, trajectory.ErrNotFound) {
		return storeErr(err)
	}
	if n := s.cfg.Limits.MaxChildren; n > 0 {
		p, err := s.store.Get(ctx, parent)
		if err != nil {
			return storeErr(err)
		}
		if len(p.Children) >= n {
			return &childrenFull{parent: parent, last: p.Children[len(p.Children)-1], max: n}
		}
	}
	rec := s.newRecord(id, parent, nil)
	rec.Tenant = tenant
	rec.Budget = trajectory.Budget{} // the ancestors' ceilings bind a child
	rec.Thread = key
	err = s.store.Create(ctx, rec, s.createdEvent(rec))
	if err == nil {
		s.tel.StateChanged(tenant, "", string(rec.State))
	}
	if err != nil && !errors.Is(err, trajectory.ErrExists) {
		return storeErr(err)
	}
	return nil
}

func (s *Server) newRecord(id, parent string, tenant *config.Tenant) *trajectory.Record {
	now := s.now()
	rec := &trajectory.Record{ID: id, ParentID: parent, State: trajectory.Ready, CreatedAt: now, UpdatedAt: now, Stage: "nominal"}
	if tenant != nil {
		rec.Tenant = tenant.Name
		rec.Budget = trajectory.Budget{
			Turns:      int64(tenant.Budget.Turns),
			Tokens:     tenant.Budget.Tokens,
			WallClockS: int64(tenant.Budget.WallClock.Std().Seconds()),
			Dollars:    tenant.Budget.Dollars,
			OnExhaust:  tenant.Budget.OnExhaust,
		}
	}
	return rec
}

func (s *Server) createdEvent(rec *trajectory.Record) trajectory.Event {
	return trajectory.Event{At: s.now(), Trajectory: rec.ID, Type: trajectory.EventCreated, To: rec.State}
}

// storeErr turns a store failure into the agent's answer: fail closed.
func storeErr(err error) error {
	var he *HTTPError
	if errors.As(err, &he) {
		return err
	}
	return &HTTPError{Code: http.StatusServiceUnavailable, Type: "api_error",
		Msg: "gatekeeper's store is unavailable, so no new turn can be admitted; retry shortly", RetryAfter: 5e9, Err: err}
}
