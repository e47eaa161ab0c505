// Package admit owns what admitting a model call decides before it is
// sent, apart from the turn that runs it: the run and thread records a
// request is admitted on (found, or created with its tenant's defaults,
// a tenant's new runs counted against its live and hourly ceilings), the
// call's reservation against its tenant's ceilings (Ceilings) and its
// settle on the tenant's ledger, and the call's admission against every
// budget of its chain (Budget: its stage, its clamped output limit and
// the worst case it reserves on each record), with the call ids that make
// admission idempotent and the hints that find a thread's record in one
// store call.
//
// A call it refuses gets a *Refusal: what kind of refusal, and the message
// the agent should see; a store that fails is one kind (Unavailable).
package admit
