// Package spendlimit holds the spend limits on people who sign in: whom a
// limit caps (a person, each member of a group, everyone else), over
// which period, and which of them bind one person. The limits come from
// config (identity.limits) and from the admin API, which keeps them in
// the store (Store); the spend itself is kept on the tenants' ledger
// (tenant.Ledger), in a book of each person's own.
package spendlimit
