// Package feed owns gatekeeper's live event stream: the events operators
// and integrators follow (record changes, turn ends, approval requests and
// votes, key headroom), the log that keeps the latest of them so that a
// subscriber resumes after a break without a gap, and the fan-out to
// subscribers in this process.
//
// Events come in through decorators of the stores (Records, Approvals)
// and a rate-limit observer (Keys): whatever any part of gatekeeper writes
// to a store is published, with no hook in the code that writes it.
// Publishing never waits: events go into a bounded queue that one
// goroutine appends to the log, and a full queue loses events (counted)
// rather than slowing a turn. The log is in memory for one process, or a
// Redis stream shared by every replica, so that each replica's changes
// reach the subscribers of all of them.
package feed
