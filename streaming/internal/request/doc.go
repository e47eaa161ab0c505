// Package request holds what the dialects share, API-free, in reading and
// rewriting a turn request's body: the check that a body is one JSON
// object, the walk over its top-level members, the helpers that copy names
// and tool results out of the body, the tool results' digests, the
// hashing of a conversation's fingerprint, the append at the end of a
// conversation, the engine that removes tools from a request, and the
// continuation of a reply whose calls were refused. Each dialect's
// request.go, rewrite.go and continuation.go say which members, names and
// items its API means.
package request
