// Package ceiling owns a tenant's ceilings (tenants[].limits) as a
// turn's admission weighs a call against them: the ledger's limits of a
// tenant's config, its rolling windows as meter levels, which ceiling a
// fit binds on, and the text of a refusal that names the ceiling and when
// room frees up.
package ceiling
