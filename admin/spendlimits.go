package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/config"
	"gatekeeper/spendlimit"
)

// The spend limits on people (docs/reference/admin-api.md, "Spend
// limits"), shaped like Anthropic's Admin API spend limits, so that a
// client written for that API can set them: a limit is {scope, amount,
// period}, amount a string of US cents, and POST creates the limit of its
// scope and period or replaces it. gatekeeper adds tenant, which confines
// a limit to the people admitted as that tenant, and lists config's
// limits (identity.limits) beside the API's, marked source "config".

// WithSpendLimits serves /admin/v1/organizations/spend_limits, keeping
// the limits in s.
func WithSpendLimits(s spendlimit.Store) Option {
	return func(a *API) { a.spendLimits = s }
}

// maxSpendLimitBody bounds a spend limit's request body.
const maxSpendLimitBody = 4 << 10

// maxSpendCents bounds a limit's amount: a billion dollars.
const maxSpendCents = 100_000_000_000

func (a *API) spendLimitRoutes(r chi.Router) {
	if a.spendLimits == nil {
		return
	}
	r.Get("/organizations/spend_limits", a.handle(a.listSpendLimits, ""))
	r.Post("/organizations/spend_limits", a.handle(a.setSpendLimit, RoleOperator))
	r.Get("/organizations/spend_limits/{id}", a.handle(a.showSpendLimit, ""))
	r.Post("/organizations/spend_limits/{id}", a.handle(a.updateSpendLimit, RoleOperator))
	r.Delete("/organizations/spend_limits/{id}", a.handle(a.deleteSpendLimit, RoleOperator))
}

// spendLimitView is a limit as the API shows it.
type spendLimitView struct {
	Type      string           `json:"type"`
	ID        string           `json:"id"`
	Amount    string           `json:"amount"`
	Currency  string           `json:"currency"`
	IsEnabled bool             `json:"is_enabled"`
	Period    string           `json:"period"`
	Scope     spendlimit.Scope `json:"scope"`
	Tenant    *string          `json:"tenant"`
	Source    string           `json:"source"`
	CreatedAt *time.Time       `json:"created_at"`
	UpdatedAt *time.Time       `json:"updated_at"`
}

func viewOf(l spendlimit.Limit) spendLimitView {
	v := spendLimitView{Type: "spend_limit", ID: l.ID, Amount: strconv.FormatInt(l.Micros/10_000, 10), Currency: "USD",
		IsEnabled: true, Period: l.Period, Scope: l.Scope, Source: "api"}
	if l.Tenant != "" {
		v.Tenant = &l.Tenant
	}
	if l.Config {
		v.Source = "config"
	} else {
		c, u := l.Created, l.Updated
		v.CreatedAt, v.UpdatedAt = &c, &u
	}
	return v
}

// spendLimitRequest is the body of POST .../spend_limits (all fields) and
// of POST .../spend_limits/{id} (amount alone).
type spendLimitRequest struct {
	Scope  *spendlimit.Scope `json:"scope"`
	Amount *string           `json:"amount"`
	Period string            `json:"period"`
	Tenant string            `json:"tenant"`
}

// parseSpendLimitRequest reads a request body; whole says the scope and
// period are required.
func parseSpendLimitRequest(body []byte, whole bool) (spendLimitRequest, int64, error) {
	var req spendLimitRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, 0, badRequest("the body is not a spend limit: " + err.Error())
	}
	if dec.More() {
		return req, 0, badRequest("the body holds more than one JSON value")
	}
	if req.Amount == nil {
		return req, 0, badRequest("amount is required: a string of US cents, \"50000\" for $500.00")
	}
	cents, err := strconv.ParseInt(*req.Amount, 10, 64)
	if err != nil || cents <= 0 || cents > maxSpendCents || strconv.FormatInt(cents, 10) != *req.Amount {
		return req, 0, badRequest("amount must be a positive integer decimal string of US cents (\"50000\" is $500.00), at most " + strconv.Itoa(maxSpendCents))
	}
	if !whole {
		if req.Scope != nil || req.Period != "" || req.Tenant != "" {
			return req, 0, badRequest("an update changes amount alone; set another scope, period or tenant with POST /admin/v1/organizations/spend_limits")
		}
		return req, cents, nil
	}
	switch req.Period {
	case config.PeriodDaily, config.PeriodWeekly, config.PeriodMonthly:
	default:
		return req, 0, badRequest("period must be daily, weekly or monthly")
	}
	if req.Scope == nil {
		return req, 0, badRequest("scope is required: {\"type\":\"user\",\"user_id\":...}, {\"type\":\"rbac_group\",\"rbac_group_id\":...} or {\"type\":\"organization\"}")
	}
	s := *req.Scope
	switch {
	case s.Type == spendlimit.ScopeUser && s.UserID != "" && s.GroupID == "":
	case s.Type == spendlimit.ScopeGroup && s.GroupID != "" && s.UserID == "":
	case s.Type == spendlimit.ScopeOrganization && s.UserID == "" && s.GroupID == "":
	default:
		return req, 0, badRequest("scope must be {\"type\":\"user\",\"user_id\":SUBJECT}, {\"type\":\"rbac_group\",\"rbac_group_id\":GROUP} or {\"type\":\"organization\"}; gatekeeper keeps no other scope")
	}
	if len(s.UserID) > 256 || len(s.GroupID) > 256 {
		return req, 0, badRequest("scope ids are at most 256 bytes")
	}
	return req, cents, nil
}

// spendLimitsFor are config's and the store's limits the caller sees:
// those of its tenants and those of every tenant.
func (a *API) spendLimitsFor(ctx context.Context, c caller) ([]spendlimit.Limit, error) {
	api, err := a.spendLimits.SpendLimits(ctx)
	if err != nil {
		return nil, err
	}
	all := spendlimit.Merge(spendlimit.FromConfig(a.config().Identity.Limits), api)
	return slices.DeleteFunc(all, func(l spendlimit.Limit) bool { return l.Tenant != "" && !c.sees(l.Tenant) }), nil
}

func (a *API) listSpendLimits(w http.ResponseWriter, r *http.Request, c caller) error {
	all, err := a.spendLimitsFor(r.Context(), c)
	if err != nil {
		return err
	}
	if types := r.URL.Query()["scope_type"]; len(types) > 0 {
		all = slices.DeleteFunc(all, func(l spendlimit.Limit) bool { return !slices.Contains(types, l.Scope.Type) })
	}
	order := map[string]int{spendlimit.ScopeOrganization: 0, spendlimit.ScopeGroup: 1, spendlimit.ScopeUser: 2}
	slices.SortStableFunc(all, func(x, y spendlimit.Limit) int { return order[x.Scope.Type] - order[y.Scope.Type] })
	data := make([]spendLimitView, len(all))
	for i, l := range all {
		data[i] = viewOf(l)
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data, "has_more": false, "next_page": nil})
	return nil
}

func (a *API) findSpendLimit(r *http.Request, c caller) (spendlimit.Limit, error) {
	id, err := url.PathUnescape(chi.URLParam(r, "id"))
	if err != nil {
		return spendlimit.Limit{}, badRequest("the id is not a valid path segment")
	}
	all, err := a.spendLimitsFor(r.Context(), c)
	if err != nil {
		return spendlimit.Limit{}, err
	}
	for _, l := range all {
		if l.ID == id {
			return l, nil
		}
	}
	return spendlimit.Limit{}, &Error{Code: http.StatusNotFound, Type: "not_found_error", Msg: "no spend limit " + strconv.Quote(id)}
}

func (a *API) showSpendLimit(w http.ResponseWriter, r *http.Request, c caller) error {
	l, err := a.findSpendLimit(r, c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewOf(l))
	return nil
}

func readSpendBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSpendLimitBody))
	if err != nil {
		return nil, badRequest("the body could not be read (at most 4 KiB): " + err.Error())
	}
	return b, nil
}

// setSpendLimit creates or replaces the limit of a scope, period and
// tenant.
func (a *API) setSpendLimit(w http.ResponseWriter, r *http.Request, c caller) error {
	body, err := readSpendBody(w, r)
	if err != nil {
		return err
	}
	req, cents, err := parseSpendLimitRequest(body, true)
	if err != nil {
		return err
	}
	if err := a.writesSpendFor(c, req.Tenant); err != nil {
		return err
	}
	now := a.now().UTC()
	l := spendlimit.Limit{ID: spendlimit.IDFor(req.Tenant, *req.Scope, req.Period), Tenant: req.Tenant, Scope: *req.Scope,
		Micros: cents * 10_000, Period: req.Period, Created: now, Updated: now}
	return a.putSpendLimit(w, r, l)
}

// writesSpendFor refuses a caller who may not set a limit on tenantName:
// "" (every tenant) takes a token scoped to every tenant.
func (a *API) writesSpendFor(c caller, tenantName string) error {
	switch {
	case tenantName == "" && c.tenants != nil:
		return &Error{Code: http.StatusForbidden, Type: "permission_error",
			Msg: "your token is scoped to tenants: name one of them in tenant; a limit on every tenant's people takes a token scoped to every tenant"}
	case tenantName != "" && !c.sees(tenantName):
		return &Error{Code: http.StatusNotFound, Type: "not_found_error", Msg: "no tenant " + strconv.Quote(tenantName)}
	case tenantName != "" && !slices.ContainsFunc(a.config().Tenants, func(t config.Tenant) bool { return t.Name == tenantName }):
		return &Error{Code: http.StatusNotFound, Type: "not_found_error", Msg: "no tenant " + strconv.Quote(tenantName)}
	}
	return nil
}

func (a *API) putSpendLimit(w http.ResponseWriter, r *http.Request, l spendlimit.Limit) error {
	got, err := a.spendLimits.PutSpendLimit(r.Context(), l)
	if errors.Is(err, spendlimit.ErrFull) {
		return &Error{Code: http.StatusConflict, Type: "conflict_error", Msg: "gatekeeper keeps at most " + strconv.Itoa(spendlimit.MaxLimits) + " spend limits; delete one first"}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewOf(got))
	return nil
}

// updateSpendLimit sets the amount of an existing limit; one from config
// is overridden by an API limit of the same scope, period and tenant.
func (a *API) updateSpendLimit(w http.ResponseWriter, r *http.Request, c caller) error {
	l, err := a.findSpendLimit(r, c)
	if err != nil {
		return err
	}
	body, err := readSpendBody(w, r)
	if err != nil {
		return err
	}
	_, cents, err := parseSpendLimitRequest(body, false)
	if err != nil {
		return err
	}
	if err := a.writesSpendFor(c, l.Tenant); err != nil {
		return err
	}
	now := a.now().UTC()
	if l.Config {
		l.Created, l.Config = now, false
	}
	l.Micros, l.Updated = cents*10_000, now
	return a.putSpendLimit(w, r, l)
}

// deleteSpendLimit removes an API limit; a config limit it overrode binds
// again. A limit from config alone changes only with the config.
func (a *API) deleteSpendLimit(w http.ResponseWriter, r *http.Request, c caller) error {
	l, err := a.findSpendLimit(r, c)
	if err != nil {
		return err
	}
	if err := a.writesSpendFor(c, l.Tenant); err != nil {
		return err
	}
	if l.Config {
		return &Error{Code: http.StatusConflict, Type: "conflict_error", Msg: "this limit is set in config (identity.limits); change it there, or override it with POST"}
	}
	if err := a.spendLimits.DeleteSpendLimit(r.Context(), l.ID); err != nil && !errors.Is(err, spendlimit.ErrNotFound) {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"type": "spend_limit_deleted", "id": l.ID})
	return nil
}
