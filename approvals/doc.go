// Package approvals owns the escrow of gated tool calls: the gates (CEL
// conditions compiled from config), the canonical form and digest of a call,
// approval requests and the held turns they belong to, the quorum rules that
// decide a request, the Directory that makes each approver one person
// across channels, what approvers are shown of a call (previews that keep
// head and tail and state what they elide, the parts a condition matched,
// invisible characters escaped), the Store interface its backends implement,
// the Notifier interface of the channels that announce requests, and the
// Service that ties them together and expires what nobody answered. Silence
// is denial.
//
// It depends on config and trajectory only; the stores (store/memory,
// store/redis), the admin API and the proxy depend on it.
package approvals
