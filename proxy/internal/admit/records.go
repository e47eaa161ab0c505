package admit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gatekeeper/config"
	"gatekeeper/proxy/internal/ceiling"
	"gatekeeper/telemetry"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// Records finds and creates the run and thread records a request is
// admitted on, and counts a tenant's new runs against its ceilings.
type Records struct {
	Store trajectory.Store
	// Ledger counts the tenants' live and hourly runs; nil when no tenant
	// has limits.
	Ledger tenant.Ledger
	Now    func() time.Time
	Log    *slog.Logger
	Tel    *telemetry.Telemetry // nil records nothing
	// MaxChildren is limits.max_children; 0 leaves children unbounded.
	MaxChildren int
}

// ErrOtherTenant: the id names another tenant's run. It never reaches the
// agent, which must not learn that the other run exists.
var ErrOtherTenant = errors.New("admit: the id names another tenant's run")

// Root returns the root record, creating it with the tenant's defaults,
// attributed to the person ctx carries (WithPerson), when it does not
// exist yet and the tenant may start a run. A root of another tenant is
// refused (ErrOtherTenant). named says whether the request named the run
// (path or X-Gatekeeper-Trajectory) rather than leaving it implicit.
func (r *Records) Root(ctx context.Context, id string, named bool, tn *config.Tenant) (*trajectory.Record, error) {
	rec, err := r.Store.Get(ctx, id)
	if errors.Is(err, trajectory.ErrNotFound) {
		if err := r.mayStart(ctx, tn, id, named); err != nil {
			return nil, err
		}
		rec = NewRecord(id, "", tn, r.Now())
		rec.CreatedBy = trajectory.Creator{Kind: trajectory.CreatorAgent, Name: tn.Name}
		rec.Person = personOf(ctx)
		err = r.Store.Create(ctx, rec, r.created(rec))
		if err != nil && !errors.Is(err, trajectory.ErrExists) {
			r.unstart(ctx, tn, id)
		}
		if err == nil {
			r.Tel.StateChanged(tn.Name, "", string(rec.State))
		}
		if errors.Is(err, trajectory.ErrExists) {
			rec, err = r.Store.Get(ctx, id)
		}
	}
	if err != nil {
		return nil, unavailable(err)
	}
	if rec.Tenant != tn.Name {
		return nil, ErrOtherTenant
	}
	return rec, nil
}

// Scoped is the store id of the run a tenant names id: the plain id when
// it is the tenant's own or no one's yet, else the tenant's scoped one
// (trajectory.TenantScoped). Two tenants may so use the same name, each
// reaching its own run.
func (r *Records) Scoped(ctx context.Context, id, tenant string) (string, error) {
	scoped := trajectory.TenantScoped(id, tenant)
	_, err := r.Store.Get(ctx, scoped)
	if err == nil {
		return scoped, nil
	}
	if !errors.Is(err, trajectory.ErrNotFound) {
		return "", unavailable(err)
	}
	rec, err := r.Store.Get(ctx, id)
	switch {
	case errors.Is(err, trajectory.ErrNotFound):
		return id, nil
	case err != nil:
		return "", unavailable(err)
	case rec.Tenant != tenant:
		return scoped, nil
	}
	return id, nil
}

// Child makes sure the child record id of parent exists for a thread
// key, creating it (attributed to the person ctx carries) when missing,
// unless the parent has MaxChildren children
// (*trajectory.ChildrenFullError): the store counts them in the step that
// adds the child, so threads starting at once never pass the bound.
func (r *Records) Child(ctx context.Context, parent, tenant, id, key string) error {
	_, err := r.Store.Get(ctx, id)
	if err == nil {
		return nil
	}
	if !errors.Is(err, trajectory.ErrNotFound) {
		return unavailable(err)
	}
	rec := NewRecord(id, parent, nil, r.Now())
	rec.Tenant = tenant
	rec.Person = personOf(ctx)
	rec.Budget = trajectory.Budget{} // the ancestors' ceilings bind a child
	rec.Thread = key
	rec.CreatedBy = trajectory.Creator{Kind: trajectory.CreatorAgent, Name: tenant}
	err = r.Store.CreateChild(ctx, rec, r.MaxChildren, r.created(rec))
	if err == nil {
		r.Tel.StateChanged(tenant, "", string(rec.State))
	}
	if err != nil && !errors.Is(err, trajectory.ErrExists) {
		if errors.As(err, new(*trajectory.ChildrenFullError)) {
			return err
		}
		return unavailable(err)
	}
	return nil
}

// NewRecord is a new READY record at the nominal stage; a root (tn set)
// takes its tenant's name and default budget.
func NewRecord(id, parent string, tn *config.Tenant, now time.Time) *trajectory.Record {
	rec := &trajectory.Record{ID: id, ParentID: parent, State: trajectory.Ready, CreatedAt: now, UpdatedAt: now, Stage: "nominal"}
	if tn != nil {
		rec.Tenant = tn.Name
		rec.Budget = trajectory.Budget{
			Turns:      int64(tn.Budget.Turns),
			Tokens:     tn.Budget.Tokens,
			WallClockS: int64(tn.Budget.WallClock.Std().Seconds()),
			Dollars:    tn.Budget.Dollars,
			OnExhaust:  tn.Budget.OnExhaust,
		}
	}
	return rec
}

func (r *Records) created(rec *trajectory.Record) trajectory.Event {
	return trajectory.Event{At: r.Now(), Trajectory: rec.ID, Type: trajectory.EventCreated, To: rec.State}
}

// mayStart decides whether a request may start run id of its tenant: a
// tenant whose runs operators start refuses it, and the tenant's live and
// hourly ceilings count it. named says the request named the run itself.
func (r *Records) mayStart(ctx context.Context, tn *config.Tenant, id string, named bool) error {
	name := trajectory.Unscoped(id, tn.Name) // as the agent named it
	if tn.Trajectories == config.TrajectoriesOperators {
		msg := fmt.Sprintf("tenant %s's runs are started by operators only (tenants[].trajectories: operators), and this request names no trajectory; ask an operator to create one through the admin API and send its id in X-Gatekeeper-Trajectory", tn.Name)
		if named {
			msg = fmt.Sprintf("tenant %s's runs are started by operators only (tenants[].trajectories: operators), and no operator created trajectory %s; ask an operator to create it through the admin API", tn.Name, name)
		}
		return &Refusal{Kind: OperatorsOnly, Msg: msg}
	}
	lim := ceiling.Limits(tn)
	if r.Ledger == nil || lim.MaxLive == 0 && lim.NewPerHour == 0 {
		return nil
	}
	st, err := tenant.StartRun(ctx, r.Ledger, tn.Name, id, lim, func(ctx context.Context, ids []string) ([]string, error) {
		return trajectory.Finished(ctx, r.Store, ids)
	})
	if err != nil {
		return unavailable(err)
	}
	switch st.Refused {
	case tenant.LimitLive:
		return &Refusal{Kind: Exhausted,
			Msg: fmt.Sprintf("tenant %s has reached its %s limit (%d runs not finished); trajectory %s was not started; it resets when one of the tenant's runs finishes",
				tn.Name, tenant.LimitLive, lim.MaxLive, name)}
	case tenant.LimitNewPerHour:
		return &Refusal{Kind: Exhausted,
			Msg: fmt.Sprintf("tenant %s has reached its %s limit (%d runs started in the last hour); trajectory %s was not started; it resets at %s",
				tn.Name, tenant.LimitNewPerHour, lim.NewPerHour, name, st.Retry.UTC().Format(time.RFC3339))}
	}
	return nil
}

// unstart forgets a run counted live whose record could not be created.
// It detaches the request's own context from its cancellation only: the
// write outlives an agent that went away, and stays in the request's
// span, with its values.
func (r *Records) unstart(ctx context.Context, tn *config.Tenant, id string) {
	if r.Ledger == nil || tn.Limits.MaxLiveTrajectories == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := r.Ledger.EndRuns(ctx, tn.Name, id); err != nil {
		r.Log.LogAttrs(ctx, slog.LevelWarn, "a run that did not start still counts as live", slog.String("tenant", tn.Name),
			slog.String("trajectory", id), slog.String("error", err.Error()))
	}
}
