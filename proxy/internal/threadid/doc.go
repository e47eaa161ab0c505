// Package threadid owns the ids that place a request in a run: the run
// it names in its headers or, failing that, the run of its client's
// session or conversation, scoped to its virtual key so that two keys
// never share one; the key of its thread inside the run (a subagent's id,
// or the conversation); and the record ids of a thread (a child of its
// parent) and of the siblings forked for parallel calls.
package threadid
