// Package wire owns what gatekeeper reads and writes on the agent-facing
// side of a request before any trajectory is involved: the checks every
// request passes before it is a turn or a pass-through (Check), the one
// canonical spelling of a provider path and the path below a provider's
// segment, virtual keys and how an agent presents one (X-Gatekeeper-Key
// included), the provider credentials an agent of a forwarding tenant
// sends on, reading a body under a size limit and a progress deadline,
// the headers an agent may not send on and the provider key put in their
// place, the redaction of provider keys from upstream error bodies, the
// checks of a turn request's members, the outcome headers a harness marks
// its run with, the thinking budget kept below a lowered output limit,
// and the pass-through allowlist.
//
// A request it refuses gets an *apierr.Error: the status and the message
// the agent should see, in its provider's error format.
package wire
