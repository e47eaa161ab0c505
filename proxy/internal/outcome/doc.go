// Package outcome owns what a finished turn reports to its records: the
// outcome itself (Turn: stop, calls, usage, whether it was estimated, the
// provider's error), how it is read from a decoded reply and what the turn
// knows of the call (Of, Failed, Undelivered, RateLimited), the event data
// (TurnData, its JSON written without reflection) and log fields of its
// record, and the settle's rules on the turn's chain
// inside the store's atomic update (Settle): the turn ended on its thread
// record, its reservation moved to spend on every record of the chain,
// the late reply of a call taken for lost charged once. None of it does
// I/O; the turn writes what it returns.
package outcome
