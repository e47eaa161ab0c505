// Package deadline owns the bounds on every call gatekeeper makes to its
// stores: the trajectory store, the shared rate-limit buckets and the
// tenants' ledger each wait at most store.timeout for one answer, so a
// turn fails closed instead of hanging while the store stalls; and the
// budget (WithBudget) by which the calls that admit a turn end together,
// so that however many there are the turn waits store.timeout in all. It
// also owns UpdateChains, the update of several chains in one step that a
// flush of settles sends (one pipeline on Redis).
package deadline
