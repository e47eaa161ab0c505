// Package shape owns the rewrites of an admitted request before it goes
// to its provider: the output limit lowered to the tenant's and the
// budget's clamps (with the thinking budget kept below it), the notices
// put at the end of the conversation (a reply cut at its output limit, an
// operator's message, the budget's steer or restrict notice, the loop
// watchdog's), the tools narrowed to the tenant's read-only grant in the
// restrict stages, and the usage a streamed Chat request is asked to
// report; the text that replaces a call withheld in those stages; and
// what a turn's event says of its request's shaping (Note).
//
// A request it cannot rewrite gets an *apierr.Error (400).
package shape
