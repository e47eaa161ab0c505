package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"gatekeeper/trajectory"
)

// Tenants name their runs in namespaces of their own: a run a tenant
// names like another tenant's is kept under its scoped id
// (trajectory.TenantScoped). The admin API addresses a run by its id as
// before while that is unambiguous, and by {tenant}/{id}, or ?tenant=,
// when tenants' ids collide.

// resolve returns the store id of the run an admin path names: id as it
// is, or id of tenant (the ?tenant= parameter, or a first path segment
// naming a tenant). Runs of tenants outside the caller's are absent: they
// neither resolve nor make an id ambiguous, and naming one is ErrNotFound.
func (a *API) resolve(ctx context.Context, c caller, id, tenant string) (string, error) {
	if tenant != "" {
		if !a.knownTenant(tenant) || !c.sees(tenant) {
			return "", &Error{Code: http.StatusNotFound, Type: "not_found_error", Msg: "no tenant " + strconv.Quote(tenant)}
		}
		return a.tenantID(ctx, id, tenant)
	}
	rec, err := a.store.Get(ctx, id)
	switch {
	case err == nil:
		visible := c.sees(rec.Tenant)
		if root, _, _ := strings.Cut(id, "/"); strings.Contains(root, "@") {
			if !visible {
				return "", errAbsent
			}
			return id, nil
		}
		holders, err := a.scopedHolders(ctx, c, id)
		switch {
		case err != nil:
			return "", err
		case visible && len(holders) > 0, len(holders) > 1:
			return "", collide(id, holders)
		case visible:
			return id, nil
		case len(holders) == 1:
			return trajectory.TenantScoped(id, holders[0]), nil
		}
		return "", errAbsent
	case !errors.Is(err, trajectory.ErrNotFound):
		return "", err
	}
	if tn, rest, ok := strings.Cut(id, "/"); ok && a.knownTenant(tn) && c.sees(tn) {
		return a.tenantID(ctx, rest, tn)
	}
	holders, err := a.scopedHolders(ctx, c, id)
	switch {
	case err != nil:
		return "", err
	case len(holders) == 1:
		return trajectory.TenantScoped(id, holders[0]), nil
	case len(holders) > 1:
		return "", collide(id, holders)
	}
	return id, nil
}

// tenantID is the store id of tenant's run id.
func (a *API) tenantID(ctx context.Context, id, tenant string) (string, error) {
	scoped := trajectory.TenantScoped(id, tenant)
	if _, err := a.store.Get(ctx, scoped); err == nil || !errors.Is(err, trajectory.ErrNotFound) {
		return scoped, err
	}
	rec, err := a.store.Get(ctx, id)
	if err != nil {
		return "", err
	}
	if rec.Tenant != tenant {
		return "", fmt.Errorf("%w: tenant %s has no run %q", trajectory.ErrNotFound, tenant, id)
	}
	return id, nil
}

// scopedHolders are the tenants the caller sees that keep a run named id
// under their scoped id.
func (a *API) scopedHolders(ctx context.Context, c caller, id string) ([]string, error) {
	var out []string
	for _, t := range a.config().Tenants {
		if !c.sees(t.Name) {
			continue
		}
		_, err := a.store.Get(ctx, trajectory.TenantScoped(id, t.Name))
		switch {
		case err == nil:
			out = append(out, t.Name)
		case !errors.Is(err, trajectory.ErrNotFound):
			return nil, err
		}
	}
	return out, nil
}

func (a *API) knownTenant(name string) bool {
	for _, t := range a.config().Tenants {
		if t.Name == name {
			return true
		}
	}
	return false
}

func collide(id string, holders []string) error {
	return &Error{Code: http.StatusConflict, Type: "conflict_error",
		Msg: fmt.Sprintf("several tenants have a run %q (%s among them): address it as /admin/v1/trajectories/{tenant}/%s or with ?tenant=",
			id, strings.Join(holders, ", "), id)}
}
