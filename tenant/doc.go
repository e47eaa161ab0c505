// Package tenant owns what bounds a tenant as a whole, across all its runs
// and every replica: its ceilings over rolling windows (dollars and tokens
// a day, dollars a month, live runs, runs started an hour), the Ledger port
// that keeps the tenant's spend and calls in flight, and the arithmetic of
// those windows: what was spent in them and when room frees up; and the
// count of a new run against its run ceilings, whoever starts it
// (StartRun). It is pure:
// store/memory and store/redis implement the Ledger.
package tenant
