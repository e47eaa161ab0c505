// Package callfilter is the call filter's engine: what every API shares of
// withholding refused client tool calls from a reply and of holding the
// others until the reply's stop shows them whole. It owns the policy (which
// names and ids are allowed, the refusals and their texts, the calls cut at
// the output limit), the buffering of held calls and of everything that
// comes after one, released in the provider's order (Holds, Release,
// DropHeld, DropAll), and the renumbering of what the client gets in
// another order or without a gap: content positions (Positions, and
// Order for a final list of them), event sequence numbers (Seq), and the
// members that carry them (Renumber).
//
// It knows no API: each dialect package gives it Rules, the reading of its
// own events and bodies, and embeds the *Filter it runs with. Filter
// satisfies streaming.FilterEngine, which streaming.CallFilter wraps.
package callfilter
