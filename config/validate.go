package config

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// FieldError is one rule broken by one field, e.g.
// {Field: "tenants[1].keys[0]", Msg: "empty (TEAM_B_KEY is not set)"}.
type FieldError struct {
	Field string
	Msg   string
}

func (e FieldError) Error() string { return e.Field + ": " + e.Msg }

// ValidationError lists every problem Validate found, in file order.
type ValidationError struct {
	Errors []FieldError
}

// Error prints one problem per line.
func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		lines[i] = fe.Error()
	}
	return strings.Join(lines, "\n")
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// MinAdminTokenLen is the shortest admin token accepted: the admin API can
// cancel every run and approve irreversible calls.
const MinAdminTokenLen = 16

// reservedNames are the first path segments gatekeeper routes itself, so no
// provider may take them as its prefix.
var reservedNames = []string{"t", "v1", "admin", "healthz", "readyz", "metrics", "oauth", "managed"}

var (
	providerNameRE = regexp.MustCompile(`^[a-z0-9-]+$`)
	approverRoleRE = regexp.MustCompile(`^approver:[a-z0-9][a-z0-9_-]*$`)
)

// Validate checks every rule and returns nil or a *ValidationError listing
// each problem. Messages name fields and variables, never secret values.
func (c *Config) Validate() error {
	v := validator{env: c.env, reported: map[string]bool{}}
	v.listen(c.Listen)
	v.tls(c.TLS)
	v.store(c.Store)
	if c.ShutdownGrace < 0 {
		v.add("shutdown_grace", "must not be negative")
	}
	v.providers(c.Providers, allForward(c.Tenants))
	v.prices(c.Prices)
	keys := v.tenants(c.Tenants, c.Identity.mappedTenants())
	v.identity(c.Identity, c.Tenants)
	v.admin(c.Admin, keys)
	v.scopes(c)
	v.limits(c.Limits)
	v.stages(c.Stages)
	if c.BudgetMinOutputTokens < 1 {
		v.add("budget_min_output_tokens", "must be positive (default %d)", DefaultBudgetMinOutputTokens)
	}
	v.log(c.Log)
	v.telemetry(c.Telemetry, keys)
	v.gates(c.Gates, c.Tenants)
	v.approvals(c.Approvals, c.Admin)
	v.rateLimits(c.RateLimits)
	v.watchdog("watchdog", c.Watchdog, nil)
	for i := range c.Tenants {
		if t := &c.Tenants[i]; t.Watchdog != nil {
			r := c.WatchdogFor(t)
			v.watchdog(fieldPath(indexPath("tenants", i), "watchdog"), *t.Watchdog, &r)
		}
	}
	v.unsetVariables()
	if len(v.errs) == 0 {
		return nil
	}
	return &ValidationError{Errors: v.errs}
}

type validator struct {
	env      map[string]envSource
	errs     []FieldError
	reported map[string]bool
}

// add records a problem; if the field came from a variable that is not set,
// the message says so, since that is nearly always the actual cause.
func (v *validator) add(field, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if src, ok := v.env[field]; ok && len(src.unset) > 0 {
		msg += " (" + src.notSet() + ")"
	}
	v.errs = append(v.errs, FieldError{Field: field, Msg: msg})
	v.reported[field] = true
}

// unsetVariables reports the fields not already reported that refer, without
// a default, to a variable that is not set: such a reference means the value
// is required, whatever the field's own rules allow.
func (v *validator) unsetVariables() {
	type pending struct {
		field string
		src   envSource
	}
	var list []pending
	for field, src := range v.env {
		if len(src.unset) > 0 && !v.reported[field] {
			list = append(list, pending{field, src})
		}
	}
	slices.SortFunc(list, func(a, b pending) int {
		return cmp.Or(cmp.Compare(a.src.line, b.src.line), strings.Compare(a.field, b.field))
	})
	for _, p := range list {
		if p.src.empty {
			v.add(p.field, "empty")
		} else {
			v.add(p.field, "incomplete")
		}
	}
}

// show quotes a field's value for a message, unless the value came from the
// environment: a secret put in the wrong field must not end up in a log.
func (v *validator) show(field, value string) string {
	if src, ok := v.env[field]; ok {
		return "the value of ${" + strings.Join(src.vars, "}, ${") + "}"
	}
	return strconv.Quote(value)
}

func (v *validator) nonNegative(field string, n int64) {
	if n < 0 {
		v.add(field, "must be >= 0")
	}
}

func (v *validator) nonNegativeFloat(field string, f float64) {
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		v.add(field, "must be a finite number >= 0")
	}
}

func (v *validator) nonNegativeDuration(field string, d Duration) {
	if d < 0 {
		v.add(field, "must not be negative")
	}
}

func (v *validator) listen(addr string) {
	const field = "listen"
	if addr == "" {
		v.add(field, "empty")
		return
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.add(field, "must be host:port, e.g. %s", DefaultListen)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.add(field, "port must be a number from 0 to 65535")
	}
}

// tls checks the listener's files are named together. Whether they hold
// a certificate and its key is read when the listener starts: Validate
// reads no file.
func (v *validator) tls(t TLS) {
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		v.add("tls.key_file", "empty: tls.cert_file is set, and HTTPS needs both")
	case t.CertFile == "" && t.KeyFile != "":
		v.add("tls.cert_file", "empty: tls.key_file is set, and HTTPS needs both")
	}
}

func (v *validator) store(s Store) {
	switch s.Kind {
	case StoreMemory:
	case StoreRedis:
		v.redisURL("store.redis_url", s.RedisURL, s.RedisCluster)
	case "":
		v.add("store.kind", "empty (want memory or redis)")
	default:
		v.add("store.kind", "unknown kind %s (want memory or redis)", v.show("store.kind", s.Kind))
	}
	if s.RedisCluster && s.Kind != StoreRedis {
		v.add("store.redis_cluster", "only with store.kind redis")
	}
	if s.Retention <= 0 {
		v.add("store.retention", "must be positive")
	}
	if s.IdleRetention <= 0 {
		v.add("store.idle_retention", "must be positive")
	}
	if s.Timeout <= 0 {
		v.add("store.timeout", "must be positive")
	}
	if s.Heartbeat <= 0 {
		v.add("store.heartbeat", "must be positive")
	}
	if s.SettleWindow < 0 || s.SettleWindow >= s.Heartbeat {
		// A settle waiting behind its reply beats for nobody: past a
		// heartbeat its call could be taken for lost.
		v.add("store.settle_window", "must be at least 0 and shorter than store.heartbeat")
	}
}

// redisURL checks the URL without ever quoting it: it may hold a password.
// A cluster's URL names its other nodes as addr= parameters and has only
// database 0.
func (v *validator) redisURL(field, raw string, cluster bool) {
	if raw == "" {
		v.add(field, "required when store.kind is redis")
		return
	}
	u, err := url.Parse(raw)
	if err != nil {
		v.add(field, "not a valid URL")
		return
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		v.add(field, "scheme must be redis:// or rediss://")
		return
	}
	if u.Host == "" {
		v.add(field, "no host")
		return
	}
	if _, port, err := net.SplitHostPort(u.Host); err == nil {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			v.add(field, "port must be a number from 1 to 65535")
			return
		}
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		if n, err := strconv.Atoi(db); err != nil || n < 0 {
			v.add(field, "path must be a database number, e.g. /0")
		} else if cluster && n != 0 {
			v.add(field, "a Redis Cluster has only database 0")
		}
	}
	if !cluster {
		return
	}
	for _, addr := range u.Query()["addr"] {
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
			v.add(field, "each addr= parameter must be host:port")
			return
		}
	}
}

func (v *validator) providers(ps []Provider, keyless bool) {
	if len(ps) == 0 {
		v.add("providers", "at least one provider is required")
		return
	}
	names := map[string]string{}
	defaultAt := ""
	for i, p := range ps {
		at := indexPath("providers", i)
		nameField := fieldPath(at, "name")
		switch {
		case p.Name == "":
			v.add(nameField, "empty")
		case !providerNameRE.MatchString(p.Name):
			v.add(nameField, "%s must match [a-z0-9-]+ (it is a URL path prefix)", v.show(nameField, p.Name))
		case slices.Contains(reservedNames, p.Name):
			v.add(nameField, "%q is reserved for gatekeeper's own routes", p.Name)
		case names[p.Name] != "":
			v.add(nameField, "duplicate provider name (also %s)", names[p.Name])
		default:
			names[p.Name] = at
		}

		switch p.API {
		case APIAnthropic, APIOpenAI, APIGemini:
		case "":
			v.add(fieldPath(at, "api"), "empty (want anthropic, openai or gemini)")
		default:
			v.add(fieldPath(at, "api"), "unknown API %s (want anthropic, openai or gemini)", v.show(fieldPath(at, "api"), p.API))
		}

		v.baseURL(fieldPath(at, "base_url"), p.BaseURL)

		if p.Default {
			if defaultAt != "" {
				v.add(fieldPath(at, "default"), "only one provider may be the default (%s already is)", defaultAt)
			} else {
				defaultAt = at
			}
		}
		if len(p.Keys) > 0 || !keyless {
			v.providerKeys(at, p.Keys)
		}
		v.passthrough(fieldPath(at, "passthrough"), p.Passthrough)
	}
}

// passthroughMethods are the methods a pass-through entry may allow.
var passthroughMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}

// passthrough checks the allowed pass-through requests: a method, and a
// path pattern written as gatekeeper compares it, in canonical form (no
// empty or dot segments, no trailing slash, no escaped '/').
func (v *validator) passthrough(field string, entries []Passthrough) {
	for i, e := range entries {
		at := indexPath(field, i)
		if !slices.Contains(passthroughMethods, e.Method) {
			v.add(fieldPath(at, "method"), "unknown method %s (want one of %s, uppercase)", strconv.Quote(e.Method), strings.Join(passthroughMethods, ", "))
		}
		pf := fieldPath(at, "path")
		lower := strings.ToLower(e.Path)
		switch {
		case !strings.HasPrefix(e.Path, "/") || len(e.Path) < 2:
			v.add(pf, "must start with / and name a path below the provider, e.g. /v1/files/*")
		case strings.HasSuffix(e.Path, "/") || strings.Contains(e.Path, "//"):
			v.add(pf, "must not have empty segments or a trailing slash")
		case strings.Contains(e.Path, "/./") || strings.Contains(e.Path, "..") || strings.HasSuffix(e.Path, "/."):
			v.add(pf, "must not have dot segments")
		case strings.Contains(lower, "%2f") || strings.Contains(e.Path, "?"):
			v.add(pf, "must not hold an escaped / or a query")
		default:
			if _, err := path.Match(e.Path, ""); err != nil {
				v.add(pf, "not a valid pattern: %v", err)
			}
		}
	}
}

// baseURL accepts an absolute http(s) URL that can take a path appended, or
// the mock. Credentials belong in keys, where they are redacted and pooled.
func (v *validator) baseURL(field, raw string) {
	if raw == MockBaseURL {
		return
	}
	if raw == "" {
		v.add(field, "empty (want an http:// or https:// URL, or mock)")
		return
	}
	u := v.httpURL(field, raw, "must be an absolute http:// or https:// URL, or mock")
	switch {
	case u == nil:
	case u.User != nil:
		v.add(field, "must not contain credentials (put provider keys under keys)")
	case u.RawQuery != "" || u.ForceQuery:
		v.add(field, "must not have a query")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		v.add(field, "must not have a fragment")
	}
}

// allForward reports whether every tenant sends its agents' own
// credentials (credentials: forward): then no call uses a provider key,
// and a provider needs none.
func allForward(ts []Tenant) bool {
	for _, t := range ts {
		if !t.Forwards() {
			return false
		}
	}
	return len(ts) > 0
}

func (v *validator) providerKeys(at string, keys []ProviderKey) {
	if len(keys) == 0 {
		v.add(fieldPath(at, "keys"), "at least one key is required (none only when every tenant has credentials: forward)")
		return
	}
	names := map[string]string{}
	for j, k := range keys {
		kat := indexPath(fieldPath(at, "keys"), j)
		switch {
		case k.Name == "":
			v.add(fieldPath(kat, "name"), "empty")
		case names[k.Name] != "":
			v.add(fieldPath(kat, "name"), "duplicate key name (also %s)", names[k.Name])
		default:
			names[k.Name] = kat
		}
		if k.Key == "" {
			v.add(fieldPath(kat, "key"), "empty")
		}
		v.nonNegative(fieldPath(kat, "rpm"), int64(k.RPM))
		v.nonNegative(fieldPath(kat, "input_tpm"), k.InputTPM)
		v.nonNegative(fieldPath(kat, "output_tpm"), k.OutputTPM)
		v.burst(kat, "rpm", int64(k.RPM), int64(k.RPMBurst))
		v.burst(kat, "input_tpm", k.InputTPM, k.InputTPMBurst)
		v.burst(kat, "output_tpm", k.OutputTPM, k.OutputTPMBurst)
	}
}

// burst checks a key's <limit>_burst: 0 (the default), or at most the
// per-minute limit it belongs to, which must be set.
func (v *validator) burst(kat, limit string, perMinute, burst int64) {
	field := fieldPath(kat, limit+"_burst")
	switch {
	case burst < 0:
		v.add(field, "must be >= 0")
	case burst > 0 && perMinute <= 0:
		v.add(field, "is set without %s, which it is a burst of", limit)
	case burst > 0 && burst > perMinute:
		v.add(field, "is %d, more than %s %d: a bucket holds at most a minute of its limit", burst, limit, perMinute)
	}
}

func (v *validator) prices(prices map[string]Price) {
	for _, model := range slices.Sorted(maps.Keys(prices)) {
		p := prices[model]
		at := keyPath("prices", model)
		if strings.TrimSpace(model) == "" {
			v.add(at, "empty model name")
		}
		v.nonNegativeFloat(fieldPath(at, "input"), p.Input)
		v.nonNegativeFloat(fieldPath(at, "cached_input"), p.CachedInput)
		v.nonNegativeFloat(fieldPath(at, "cache_write"), p.CacheWrite)
		v.nonNegativeFloat(fieldPath(at, "output"), p.Output)
		v.nonNegativeFloat(fieldPath(at, "cache_write_1h"), p.CacheWrite1h)
	}
}

// keyOwner says where a virtual key was first seen.
type keyOwner struct {
	tenant string // the tenant's name, as shown in messages
	field  string
}

// tenants checks the tenants and returns the hash of every well-formed
// virtual key, so admin tokens can be checked against them.
// tenants checks the tenants; one that people reach through an identity
// group (mapped) may have no virtual key.
func (v *validator) tenants(ts []Tenant, mapped map[string]bool) map[[32]byte]keyOwner {
	names := map[string]string{}
	keys := map[[32]byte]keyOwner{}
	for i, t := range ts {
		at := indexPath("tenants", i)
		switch {
		case t.Name == "":
			v.add(fieldPath(at, "name"), "empty")
		case names[t.Name] != "":
			v.add(fieldPath(at, "name"), "duplicate tenant name (also %s)", names[t.Name])
		case strings.ContainsAny(t.Name, "{}/"):
			// Braces would move the tenant's Redis hash tag; a slash would
			// make "{tenant}/{id}" ambiguous in the admin API.
			v.add(fieldPath(at, "name"), "must not contain {, } or /")
		default:
			names[t.Name] = at
		}

		if len(t.Keys) == 0 && !mapped[t.Name] {
			v.add(fieldPath(at, "keys"), "at least one virtual key is required (or map an identity group to the tenant)")
		}
		for j, k := range t.Keys {
			kat := indexPath(fieldPath(at, "keys"), j)
			h, err := keyHash(k)
			if err != nil {
				v.add(kat, "%v", err)
				continue
			}
			prev, dup := keys[h]
			switch {
			case !dup:
				keys[h] = keyOwner{tenant: v.show(fieldPath(at, "name"), t.Name), field: kat}
			case strings.HasPrefix(prev.field, at+"."):
				v.add(kat, "duplicate virtual key (also %s)", prev.field)
			default:
				v.add(kat, "virtual key already used by tenant %s (%s); each key must identify one tenant", prev.tenant, prev.field)
			}
		}

		if !priorityClass(t.Priority) {
			v.add(fieldPath(at, "priority"), "unknown priority %s (want interactive, standard or batch)", v.show(fieldPath(at, "priority"), t.Priority))
		}

		v.nonNegative(fieldPath(at, "max_input_tokens"), t.MaxInputTokens)
		b := fieldPath(at, "budget")
		v.nonNegative(fieldPath(b, "turns"), int64(t.Budget.Turns))
		v.nonNegative(fieldPath(b, "tokens"), t.Budget.Tokens)
		v.nonNegativeDuration(fieldPath(b, "wall_clock"), t.Budget.WallClock)
		v.nonNegativeFloat(fieldPath(b, "dollars"), t.Budget.Dollars)
		if oe := t.Budget.OnExhaust; oe != "" && oe != "fail" && oe != "pause" {
			v.add(fieldPath(b, "on_exhaust"), "unknown policy %s (want fail or pause)", v.show(fieldPath(b, "on_exhaust"), oe))
		}

		cl := fieldPath(at, "call_limits")
		v.nonNegative(fieldPath(cl, "max_output_tokens"), int64(t.CallLimits.MaxOutputTokens))
		v.nonNegativeDuration(fieldPath(cl, "call_deadline"), t.CallLimits.CallDeadline)

		lim := fieldPath(at, "limits")
		v.nonNegativeFloat(fieldPath(lim, "dollars_per_day"), t.Limits.DollarsPerDay)
		v.nonNegativeFloat(fieldPath(lim, "dollars_per_month"), t.Limits.DollarsPerMonth)
		v.nonNegative(fieldPath(lim, "tokens_per_day"), t.Limits.TokensPerDay)
		v.nonNegative(fieldPath(lim, "max_live_trajectories"), int64(t.Limits.MaxLiveTrajectories))
		v.nonNegative(fieldPath(lim, "new_trajectories_per_hour"), int64(t.Limits.NewTrajectoriesPerHour))
		switch t.Trajectories {
		case TrajectoriesAgents, TrajectoriesOperators:
		default:
			v.add(fieldPath(at, "trajectories"), "unknown value %s (want agents or operators)", v.show(fieldPath(at, "trajectories"), t.Trajectories))
		}
		switch t.Credentials {
		case CredentialsPool, CredentialsForward:
		default:
			v.add(fieldPath(at, "credentials"), "unknown value %s (want pool or forward)", v.show(fieldPath(at, "credentials"), t.Credentials))
		}

		for j, tool := range t.ReadOnlyTools {
			if tool == "" {
				v.add(indexPath(fieldPath(at, "read_only_tools"), j), "empty")
			}
		}
		for j, beta := range t.AnthropicBeta {
			if beta == "" || strings.ContainsAny(beta, ", \t") {
				v.add(indexPath(fieldPath(at, "anthropic_beta"), j), "want one beta name, without commas or spaces")
			}
		}
	}
	return keys
}

func (v *validator) admin(a Admin, virtualKeys map[[32]byte]keyOwner) {
	names := map[string]string{}
	tokens := map[[32]byte]string{}
	for i, tok := range a.Tokens {
		at := indexPath("admin.tokens", i)
		switch {
		case tok.Name == "":
			v.add(fieldPath(at, "name"), "empty")
		case names[tok.Name] != "":
			v.add(fieldPath(at, "name"), "duplicate token name (also %s)", names[tok.Name])
		default:
			names[tok.Name] = at
		}

		tf := fieldPath(at, "token")
		h := HashKey(tok.Token)
		switch {
		case tok.Token == "":
			v.add(tf, "empty")
		case utf8.RuneCountInString(tok.Token) < MinAdminTokenLen:
			v.add(tf, "too short: at least %d characters", MinAdminTokenLen)
		case tokens[h] != "":
			v.add(tf, "same token as %s; each token must identify one holder", tokens[h])
		case virtualKeys[h] != keyOwner{}:
			v.add(tf, "same as a virtual key (%s); an agent must never hold an admin token", virtualKeys[h].field)
		default:
			tokens[h] = at
		}

		v.adminRoles(fieldPath(at, "roles"), tok.Roles)
	}
}

// adminRoles checks the roles of an admin token or an admin group.
func (v *validator) adminRoles(rf string, roles []string) {
	if len(roles) == 0 {
		v.add(rf, "at least one role is required")
	}
	seen := map[string]bool{}
	for j, r := range roles {
		switch {
		case r != RoleOperator && r != RoleApprover && !approverRoleRE.MatchString(r):
			v.add(indexPath(rf, j), "unknown role %s (want operator, approver or approver:<group>, lowercase)", v.show(indexPath(rf, j), r))
		case seen[r]:
			v.add(indexPath(rf, j), "duplicate role")
		}
		seen[r] = true
	}
}

// scopes checks the tenants admin tokens and approvers are scoped to:
// each names a configured tenant once, and a list, when written, is not
// empty (which would see nothing; leaving it out means every tenant).
func (v *validator) scopes(c *Config) {
	known := map[string]bool{}
	for _, t := range c.Tenants {
		known[t.Name] = true
	}
	check := func(at string, tenants []string) {
		if tenants != nil && len(tenants) == 0 {
			v.add(at, "empty: it would see no tenant; leave it out to see every tenant")
		}
		seen := map[string]bool{}
		for j, t := range tenants {
			switch {
			case !known[t]:
				v.add(indexPath(at, j), "no tenant is named %s", v.show(indexPath(at, j), t))
			case seen[t]:
				v.add(indexPath(at, j), "duplicate tenant")
			}
			seen[t] = true
		}
	}
	for i, tok := range c.Admin.Tokens {
		check(fieldPath(indexPath("admin.tokens", i), "tenants"), tok.Tenants)
	}
	for i, p := range c.Approvals.People {
		check(fieldPath(indexPath("approvals.people", i), "tenants"), p.Tenants)
	}
	for i, g := range c.Identity.AdminGroups {
		check(fieldPath(indexPath("identity.admin_groups", i), "tenants"), g.Tenants)
	}
}

func (v *validator) limits(l Limits) {
	if l.MaxBodyBytes <= 0 {
		v.add("limits.max_body_bytes", "must be positive")
	}
	if l.MaxEventBytes <= 0 {
		v.add("limits.max_event_bytes", "must be positive")
	}
	if l.ToolDeadline <= 0 {
		v.add("limits.tool_deadline", "must be positive")
	}
	v.nonNegativeDuration("limits.idle_finish", l.IdleFinish)
	v.nonNegativeDuration("limits.pause_hold", l.PauseHold)
	if l.BodyTimeout <= 0 {
		v.add("limits.body_timeout", "must be positive")
	}
	if l.MaxPendingConnections < 0 {
		v.add("limits.max_pending_connections", "must be >= 0 (0: a quarter of the open-file limit)")
	}
	if l.HeaderTimeout <= 0 {
		v.add("limits.header_timeout", "must be positive")
	}
	if l.IdleTimeout <= 0 {
		v.add("limits.idle_timeout", "must be positive")
	}
	if l.MaxChildren <= 0 {
		v.add("limits.max_children", "must be positive")
	}
}

// stages requires 0 < steer < restrict < halt ≤ 1: halt above 1 would let a
// run pass its ceiling, and equal values would skip a stage silently.
func (v *validator) stages(st Stages) {
	for _, f := range []struct {
		name string
		val  float64
	}{{"steer", st.Steer}, {"restrict", st.Restrict}, {"halt", st.Halt}} {
		if math.IsNaN(f.val) || f.val <= 0 || f.val > 1 {
			v.add("budget_stages."+f.name, "is %v, want a value in (0, 1]", f.val)
		}
	}
	if st.Steer >= st.Restrict || st.Restrict >= st.Halt {
		v.add("budget_stages", "want steer < restrict < halt, got %v, %v, %v", st.Steer, st.Restrict, st.Halt)
	}
}

func (v *validator) log(l Log) {
	switch l.Level {
	case LogDebug, LogInfo, LogWarn, LogError:
	default:
		v.add("log.level", "unknown level %s (want debug, info, warn or error)", v.show("log.level", l.Level))
	}
	switch l.Format {
	case LogJSON, LogText:
	default:
		v.add("log.format", "unknown format %s (want json or text)", v.show("log.format", l.Format))
	}
}

func (v *validator) telemetry(t Telemetry, virtualKeys map[[32]byte]keyOwner) {
	if strings.TrimSpace(t.ServiceName) == "" {
		v.add("telemetry.service_name", "empty")
	}
	// The token is optional, but once set it must be one worth requiring,
	// and one no agent holds.
	if tok := t.MetricsToken; tok != "" {
		switch {
		case utf8.RuneCountInString(tok) < MinAdminTokenLen:
			v.add("telemetry.metrics_token", "too short: at least %d characters", MinAdminTokenLen)
		case virtualKeys[HashKey(tok)] != keyOwner{}:
			v.add("telemetry.metrics_token", "same as a virtual key (%s); an agent must not read the fleet's metrics", virtualKeys[HashKey(tok)].field)
		}
	}
	if n := t.MetricsPeople; n < 0 || n > MaxMetricsPeople {
		v.add("telemetry.metrics_people", "is %d, want 0 (no person label) to %d", n, MaxMetricsPeople)
	}
	if r := t.Traces.SampleRatio; math.IsNaN(r) || r < 0 || r > 1 {
		v.add("telemetry.traces.sample_ratio", "is %v, want a value in [0, 1]", r)
	}
	v.otlpEndpoint("telemetry.traces.otlp_endpoint", t.Traces.OTLPEndpoint)
}

// otlpEndpoint accepts empty or an absolute http(s) URL. The value is never
// quoted: a collector URL may carry a token.
func (v *validator) otlpEndpoint(field, raw string) {
	if raw == "" {
		return
	}
	v.httpURL(field, raw, "must be an absolute http:// or https:// URL, e.g. http://127.0.0.1:4318/v1/traces")
}

// httpURL parses raw as an absolute http(s) URL with a host; it reports
// what is wrong (badScheme when the scheme is) and returns nil, or the URL.
func (v *validator) httpURL(field, raw, badScheme string) *url.URL {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		v.add(field, "not a valid URL")
	case u.Scheme != "http" && u.Scheme != "https":
		v.add(field, "%s", badScheme)
	case u.Host == "":
		v.add(field, "no host")
	default:
		return u
	}
	return nil
}

// priorityClass reports whether p is one of the priority classes that
// tenants are given and rate_limits.weights shares capacity between.
func priorityClass(p string) bool {
	switch p {
	case PriorityInteractive, PriorityStandard, PriorityBatch:
		return true
	}
	return false
}

func (v *validator) rateLimits(r RateLimits) {
	if r.MaxWait <= 0 || r.MaxWait.Std() > MaxMaxWait {
		v.add("rate_limits.max_wait", "is %v, want a duration in (0s, %v]", r.MaxWait, MaxMaxWait)
	}
	for _, class := range slices.Sorted(maps.Keys(r.Weights)) {
		field := keyPath("rate_limits.weights", class)
		if !priorityClass(class) {
			v.add(field, "unknown class %s (want interactive, standard or batch)", v.show(field, class))
			continue
		}
		if w := r.Weights[class]; w < 1 {
			v.add(field, "is %d, want a weight >= 1", w)
		}
	}
	if r.DefaultOutputTokens < 1 {
		v.add("rate_limits.default_output_tokens", "must be positive")
	}
}
