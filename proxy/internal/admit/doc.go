// Package admit owns what admitting a model call decides before it is
// sent, apart from the turn that runs it: the run and thread records a
// request is admitted on (found, or created with its tenant's defaults,
// a tenant's new runs counted against its live and hourly ceilings; a
// thread's child record, shared past max_children; the siblings a busy
// thread forks), the call's reservation against its tenant's ceilings
// (Ceilings) and its settle on the tenant's ledger, the admission step on
// a thread record and its ancestors inside the store's update (Budget:
// the record's state, its tool results, pending controls, the loop
// watchdog, the call's stage, its clamped output limit and the worst case
// it reserves on each record), the waits between attempts (Waiter), with
// the call ids that make admission idempotent and the hints that find a
// thread's record in one store call.
//
// A call it refuses gets a *Refusal: what kind of refusal, and the message
// the agent should see; a store that fails is one kind (Unavailable). The
// answers that send a request to another record or make it wait are its
// sentinel errors (ErrBusy, ErrOtherThread, ErrAwaiting, ErrPaused, ErrWait).
package admit
