// Package sweep owns the background work that keeps the store's runs from
// being left behind: the heartbeat of this replica's calls in flight, the
// sweep that reclaims (and charges as estimated) the calls whose replica
// fell silent or restarted, and the sweep that finishes the runs idle for
// limits.idle_finish. The replicas coordinate through the store's atomic
// updates alone: the first sweep to find a call still there and still
// silent reclaims it, the others find it gone.
package sweep
