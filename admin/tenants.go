package admin

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/config"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// TenantLedger is what the admin API reads of tenants' spend, and where
// the runs operators create are counted against their tenants' live and
// hourly ceilings.
type TenantLedger interface {
	Usage(ctx context.Context, tenant string) (tenant.Usage, error)
	tenant.Runs
}

var _ TenantLedger = tenant.Ledger(nil)

// WithLedger shows each tenant's spend over its windows in
// GET /admin/v1/tenants and counts the runs operators create against
// their tenants' max_live_trajectories and new_trajectories_per_hour;
// without it (or with nil) only limits and live runs are shown, and
// nothing is counted.
func WithLedger(l TenantLedger) Option {
	return func(a *API) { a.ledger = l }
}

// tenantView is one tenant in GET /admin/v1/tenants.
type tenantView struct {
	Name         string              `json:"name"`
	Priority     string              `json:"priority"`
	Trajectories string              `json:"trajectories"`
	Limits       config.TenantLimits `json:"limits"`
	// Spend is null without a ledger.
	Spend *tenantSpend `json:"spend"`
	// LiveRuns counts the tenant's runs not finished, up to
	// maxListLimit; LiveRunsCapped says there may be more.
	LiveRuns       int  `json:"live_runs"`
	LiveRunsCapped bool `json:"live_runs_capped,omitempty"`
}

// tenantSpend is a tenant's spend per window as its ledger reads it.
type tenantSpend struct {
	AsOf     time.Time   `json:"as_of"`
	Day      windowSpend `json:"day"`   // the last 24 hours
	Month    windowSpend `json:"month"` // the last 30 days
	InFlight struct {
		Calls int64 `json:"calls"`
		windowSpend
	} `json:"in_flight"` // what the calls in flight hold
	// StartedLastHour counts the runs started in the last hour, by agents
	// and operators, kept while new_trajectories_per_hour is set.
	StartedLastHour int64 `json:"started_last_hour"`
}

type windowSpend struct {
	Dollars float64 `json:"dollars"`
	Tokens  int64   `json:"tokens"`
}

func spendOf(a tenant.Amount) windowSpend {
	return windowSpend{Dollars: float64(a.Micros) / 1e6, Tokens: a.Tokens}
}

func (a *API) tenantRoutes(r chi.Router) {
	r.Get("/tenants", a.handle(a.listTenants, RoleOperator))
	r.Get("/tenants/{name}", a.handle(a.showTenant, RoleOperator))
}

func (a *API) listTenants(w http.ResponseWriter, r *http.Request, c caller) error {
	tenants := a.config().Tenants
	out := make([]tenantView, 0, len(tenants))
	for i := range tenants {
		if !c.sees(tenants[i].Name) {
			continue
		}
		v, err := a.tenantView(r.Context(), &tenants[i])
		if err != nil {
			return err
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"tenants": out})
	return nil
}

func (a *API) showTenant(w http.ResponseWriter, r *http.Request, c caller) error {
	name, err := url.PathUnescape(chi.URLParam(r, "name"))
	if err != nil {
		return badRequest("tenant name is not a valid path segment")
	}
	tenants := a.config().Tenants
	for i := range tenants {
		if tenants[i].Name == name && c.sees(name) {
			v, err := a.tenantView(r.Context(), &tenants[i])
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, v)
			return nil
		}
	}
	return &Error{Code: http.StatusNotFound, Type: "not_found_error", Msg: "no tenant " + strconv.Quote(name)}
}

func (a *API) tenantView(ctx context.Context, t *config.Tenant) (tenantView, error) {
	v := tenantView{Name: t.Name, Priority: t.Priority, Trajectories: t.Trajectories, Limits: t.Limits}
	roots := ""
	recs, err := a.store.List(ctx, trajectory.Filter{Tenant: t.Name, ParentID: &roots, Limit: maxListLimit})
	if err != nil {
		return v, err
	}
	for _, rec := range recs {
		if !rec.State.Terminal() {
			v.LiveRuns++
		}
	}
	v.LiveRunsCapped = len(recs) == maxListLimit
	if a.ledger == nil {
		return v, nil
	}
	u, err := a.ledger.Usage(ctx, t.Name)
	if err != nil {
		return v, err
	}
	sp := &tenantSpend{AsOf: u.Now, Day: spendOf(u.Day()), Month: spendOf(u.Month()), StartedLastHour: u.Started}
	sp.InFlight.Calls, sp.InFlight.windowSpend = u.InFlight, spendOf(u.Reserved)
	v.Spend = sp
	return v, nil
}

// startRun counts run id, which an operator creates, against t's live
// and hourly ceilings, as the proxy counts the runs agents start: with no
// headroom of their own, since the ceilings bound what the tenant runs
// whoever starts it (an operator who needs more raises them). Over a
// ceiling it answers 429 tenant_limit_error.
func (a *API) startRun(ctx context.Context, t *config.Tenant, id string) error {
	lim := tenant.Limits{MaxLive: int64(t.Limits.MaxLiveTrajectories), NewPerHour: int64(t.Limits.NewTrajectoriesPerHour)}
	if a.ledger == nil || lim.MaxLive == 0 && lim.NewPerHour == 0 {
		return nil
	}
	st, err := tenant.StartRun(ctx, a.ledger, t.Name, id, lim, func(ctx context.Context, ids []string) ([]string, error) {
		return trajectory.Finished(ctx, a.store, ids)
	})
	if err != nil {
		return err
	}
	name := trajectory.Unscoped(id, t.Name)
	switch st.Refused {
	case tenant.LimitLive:
		return &Error{Code: http.StatusTooManyRequests, Type: "tenant_limit_error",
			Msg: fmt.Sprintf("tenant %s has reached its %s limit (%d runs not finished); trajectory %s was not created; finish or cancel one of its runs, or raise tenants[].limits.%s",
				t.Name, tenant.LimitLive, lim.MaxLive, name, tenant.LimitLive)}
	case tenant.LimitNewPerHour:
		return &Error{Code: http.StatusTooManyRequests, Type: "tenant_limit_error", RetryAfter: max(st.Retry.Sub(a.now()), time.Second),
			Msg: fmt.Sprintf("tenant %s has reached its %s limit (%d runs started in the last hour); trajectory %s was not created; it resets at %s",
				t.Name, tenant.LimitNewPerHour, lim.NewPerHour, name, st.Retry.UTC().Format(time.RFC3339))}
	}
	return nil
}

// unstart forgets a run counted live whose record could not be created.
func (a *API) unstart(t *config.Tenant, id string) {
	if a.ledger == nil || t.Limits.MaxLiveTrajectories == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.ledger.EndRuns(ctx, t.Name, id); err != nil {
		a.log.LogAttrs(ctx, slog.LevelWarn, "a run that was not created still counts as live", slog.String("tenant", t.Name),
			slog.String("trajectory", id), slog.String("error", err.Error()))
	}
}
