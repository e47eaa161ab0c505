package spendlimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// Scope types, as Anthropic's Admin API spells them.
const (
	ScopeUser         = "user"
	ScopeGroup        = "rbac_group"
	ScopeOrganization = "organization"
)

// Scope is whom a limit caps: a person by their token's subject
// (ScopeUser, UserID), each member of a group (ScopeGroup, GroupID), or
// everyone without a limit of their own for the period
// (ScopeOrganization).
type Scope struct {
	Type    string `json:"type"`
	UserID  string `json:"user_id,omitempty"`
	GroupID string `json:"rbac_group_id,omitempty"`
}

// Limit caps the spend of each person its scope names over Period
// (config.PeriodDaily, PeriodWeekly or PeriodMonthly): the last 24 hours,
// 7 days or 30 days, rolling.
type Limit struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant,omitempty"` // only people admitted as this tenant; "" for all
	Scope  Scope  `json:"scope"`
	Micros int64  `json:"micros"`
	Period string `json:"period"`
	// Created and Updated are when the admin API set it; zero for a
	// limit from config.
	Created time.Time `json:"created_at"`
	Updated time.Time `json:"updated_at"`
	// Config: the limit comes from config, not the admin API.
	Config bool `json:"-"`
}

// MaxLimits bounds the limits the admin API keeps.
const MaxLimits = 1000

// Errors of a Store.
var (
	ErrNotFound = errors.New("spendlimit: no such limit")
	ErrFull     = errors.New("spendlimit: too many limits")
)

// Store keeps the admin API's limits, shared by every replica.
type Store interface {
	// SpendLimits lists them all.
	SpendLimits(ctx context.Context) ([]Limit, error)
	// PutSpendLimit creates l, or replaces the limit with its ID, keeping
	// that one's Created; it returns what it stored.
	PutSpendLimit(ctx context.Context, l Limit) (Limit, error)
	// DeleteSpendLimit removes the limit with id (ErrNotFound when none).
	DeleteSpendLimit(ctx context.Context, id string) error
}

// IDFor is the id of the limit on scope over period for tenant: one limit
// per scope, tenant and period, so that setting one again replaces it.
func IDFor(tenantName string, s Scope, period string) string {
	h := sha256.Sum256([]byte(tenantName + "\x00" + s.Type + "\x00" + s.UserID + "\x00" + s.GroupID + "\x00" + period))
	return "spl_" + hex.EncodeToString(h[:12])
}

// FromConfig are config's limits as Limits.
func FromConfig(ls []config.PersonLimit) []Limit {
	out := make([]Limit, 0, len(ls))
	for _, l := range ls {
		s := Scope{Type: ScopeOrganization}
		switch {
		case l.Scope.Person != "":
			s = Scope{Type: ScopeUser, UserID: l.Scope.Person}
		case l.Scope.Group != "":
			s = Scope{Type: ScopeGroup, GroupID: l.Scope.Group}
		}
		out = append(out, Limit{ID: IDFor(l.Tenant, s, l.Period), Tenant: l.Tenant, Scope: s,
			Micros: meter.FromDollars(l.Dollars), Period: l.Period, Config: true})
	}
	return out
}

// Merge is config's limits with the admin API's: one of the API's
// replaces the config's of the same id (scope, tenant and period).
func Merge(cfg, api []Limit) []Limit {
	if len(api) == 0 {
		return cfg
	}
	out := make([]Limit, 0, len(cfg)+len(api))
	for _, c := range cfg {
		replaced := false
		for _, a := range api {
			if a.ID == c.ID {
				replaced = true
				break
			}
		}
		if !replaced {
			out = append(out, c)
		}
	}
	return append(out, api...)
}

// Caps are the limits that bind one person, per period; nil for none.
type Caps struct {
	Day, Week, Month *Limit
}

// Any reports whether some limit binds.
func (c Caps) Any() bool { return c.Day != nil || c.Week != nil || c.Month != nil }

// Limits are the caps in the ledger's units.
func (c Caps) Limits() tenant.Limits {
	var l tenant.Limits
	if c.Day != nil {
		l.MicrosPerDay = c.Day.Micros
	}
	if c.Week != nil {
		l.MicrosPerWeek = c.Week.Micros
	}
	if c.Month != nil {
		l.MicrosPerMonth = c.Month.Micros
	}
	return l
}

// For picks, among limits, those binding person p admitted as tenant
// tenantName, the tightest per period: their own limit, else the
// default one, and their groups' limits on top.
func For(limits []Limit, tenantName string, p *trajectory.Person) Caps {
	var own, group, def Caps
	for i := range limits {
		l := &limits[i]
		if l.Tenant != "" && l.Tenant != tenantName {
			continue
		}
		switch l.Scope.Type {
		case ScopeUser:
			if l.Scope.UserID == p.Subject {
				own.tighten(l)
			}
		case ScopeGroup:
			for _, g := range p.Groups {
				if g == l.Scope.GroupID {
					group.tighten(l)
					break
				}
			}
		case ScopeOrganization:
			def.tighten(l)
		}
	}
	pick := func(own, def, group *Limit) *Limit {
		l := own
		if l == nil {
			l = def
		}
		if group != nil && (l == nil || group.Micros < l.Micros) {
			l = group
		}
		return l
	}
	return Caps{Day: pick(own.Day, def.Day, group.Day), Week: pick(own.Week, def.Week, group.Week),
		Month: pick(own.Month, def.Month, group.Month)}
}

// tighten keeps l in its period's place when it is tighter than what is
// there.
func (c *Caps) tighten(l *Limit) {
	var at **Limit
	switch l.Period {
	case config.PeriodDaily:
		at = &c.Day
	case config.PeriodWeekly:
		at = &c.Week
	case config.PeriodMonthly:
		at = &c.Month
	default:
		return
	}
	if *at == nil || l.Micros < (*at).Micros {
		*at = l
	}
}

// Book is the name of p's book on the tenants' ledger: a hash of the
// subject, under "p/", which no tenant's name can hold.
func Book(p *trajectory.Person) string {
	h := sha256.Sum256([]byte(p.Subject))
	return "p/" + hex.EncodeToString(h[:16])
}

// Describe names a limit for a person's refusal: "the default daily
// limit of $5.00", "group eng's weekly limit of $50.00", "their own monthly
// limit of $20.00".
func (l *Limit) Describe() string {
	amount := fmt.Sprintf("$%.2f", meter.ToDollars(l.Micros))
	switch l.Scope.Type {
	case ScopeUser:
		return "their own " + l.Period + " spend limit of " + amount
	case ScopeGroup:
		return "group " + l.Scope.GroupID + "'s " + l.Period + " spend limit of " + amount + " a member"
	}
	return "the default " + l.Period + " spend limit of " + amount + " a person"
}
