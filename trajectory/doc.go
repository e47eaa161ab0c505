// Package trajectory owns the record of one agent run: its identity, its
// state machine with the one function allowed to change state, the turn
// lifecycle built on that function, the outcome and task class a run is
// judged with, the event log entries that describe each change, and the
// Store port that persists records and events.
//
// The package is pure: no I/O, no clock, no globals, and no imports from the
// rest of gatekeeper. Time comes in as a now argument so that deadlines and
// timestamps are decided by the caller and tests never sleep. Adapters (the
// memory and Redis stores, the proxy, the admin API) depend on this package,
// never the reverse; internal/purity enforces that.
package trajectory
