// Package inflight owns this process's registry of the calls in flight,
// by thread record, and of the requests waiting on a record (paused, or
// holding a reply for approval), so that a control signal from any
// replica acts on them at once: a call is stopped, and the waiters look
// at their record again. Listen subscribes to those signals.
package inflight
