package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"gatekeeper/config"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// maxSiblings bounds the sibling threads forked for parallel calls on one
// conversation (parallel sampling, identical requests from many clients).
const maxSiblings = 32

// Session headers real agents send (Claude Code, Codex).
var sessionHeaders = []string{"X-Claude-Code-Session-Id", "Session-Id", "Thread-Id"}

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
	if pr.SessionHint != "" {
		return "s-" + scopedHash(req.keyHash, "session", pr.SessionHint), nil
	}
	return "c-" + scopedHash(req.keyHash, "conversation", pr.Fingerprint), nil
}

// headerRootID is the trajectory a request's headers name:
// X-Gatekeeper-Trajectory, else the client's own session id scoped to its
// virtual key; "" when they name none.
func headerRootID(r *http.Request, req *request) (string, error) {
	if id := r.Header.Get("X-Gatekeeper-Trajectory"); id != "" {
		if !trajectory.ValidID(id) {
			return "", httpErr(http.StatusBadRequest, errInvalidRequest,
				"X-Gatekeeper-Trajectory must be 1-128 characters of A-Z a-z 0-9 . _ : -")
		}
		return id, nil
	}
	for _, h := range sessionHeaders {
		if v := r.Header.Get(h); v != "" {
			return "s-" + scopedHash(req.keyHash, "session", v), nil
		}
	}
	return "", nil
}

// scopedHash derives an id from a client-chosen value so that two virtual
// keys sending the same session id never share a trajectory.
func scopedHash(keyHash [32]byte, kind, v string) string {
	h := sha256.New()
	h.Write(keyHash[:])
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write([]byte(v))
	return hex.EncodeToString(h.Sum(nil)[:10])
}

// threadKey names the conversation inside a trajectory: the client's own
// agent id where it sends one (Claude Code subagents), else the
// conversation fingerprint.
func threadKey(r *http.Request, pr *streaming.Request) (key, parentKey string) {
	if id := r.Header.Get("X-Claude-Code-Agent-Id"); id != "" {
		key = "agent:" + id
		if pid := r.Header.Get("X-Claude-Code-Parent-Agent-Id"); pid != "" {
			parentKey = "agent:" + pid
		}
		return key, parentKey
	}
	return "fp:" + pr.Fingerprint, ""
}

func childID(parent, key string) string {
	sum := sha256.Sum256([]byte(key))
	return parent + "/" + hex.EncodeToString(sum[:6])
}

// siblingID names the n-th sibling thread of base, a child of parent. A
// sibling of the root itself is the root's child.
func siblingID(parent, base string, n int) string {
	if base == parent {
		return base + "/~" + strconv.Itoa(n)
	}
	return base + "~" + strconv.Itoa(n)
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
