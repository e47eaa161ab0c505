// Package purity holds the tests that keep gatekeeper's layers apart: its
// pure packages (trajectory, the streaming tree, tenant, meter, report)
// free of I/O, of the adapters and of package state; and the layers below
// the proxy (approvals, ratelimit, proxy/relay) free of what uses them.
// It has no code of its own.
package purity
