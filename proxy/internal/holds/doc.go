// Package holds owns the escrow's reading and bookkeeping of stored
// holds, over the approvals store: a turn's latest hold and the hold a
// continuation's hold follows (holds stored before a hold recorded its
// place in its turn's chain included), a hold's requests and whether all
// are decided, the release re-check of approved calls against the held
// reply, approvals turned stale, a hold's end, and the texts and tool
// results of refused calls.
package holds
