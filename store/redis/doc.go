// Package redis is the shared trajectory store: records and their event
// logs in Redis, so that every replica behind a load balancer sees, and
// atomically changes, the same trajectories.
//
// # Key layout
//
// Every key of a trajectory tree carries the tree's root id as its hash
// tag. The root of an id is the part before its first "/" (the root of
// "run-42/3f9a~2" is "run-42"), and thread records are named after their
// parent, so a run and all its threads live in one slot:
//
//	gk:{<root>}:rec:<id>  hash: json (the record's JSON form, without
//	                      children), kids (the children's ids, a JSON
//	                      array), ver (bumped by every save), seq (the
//	                      last event seq given out)
//	gk:{<root>}:ev:<id>   stream: one entry per event, entry id 0-<seq>,
//	                      fields e (the event's JSON, without seq, id and
//	                      data) and d (its data, verbatim; absent if none)
//	gk:{idx}:created      sorted set, all scores 0, read in lexical order:
//	                      one member per record, its inverted creation
//	                      time in hex then ":" and its id, so that the
//	                      newest sorts first and ties sort by id
//	gk:{idx}:expires      sorted set: the members of finished records,
//	                      scored by when their keys expire (unix ms)
//
// Ids holding "{" or "}" are refused: a brace would move the hash tag.
//
// # Atomicity
//
// Each write is one Lua script, so it is atomic with respect to every
// replica. Update is an optimistic transaction: it reads the record and
// its version, runs fn, and saves with a script that compares the
// version; a writer that lost the race backs off with jitter and starts
// over, MaxUpdateAttempts times at most (ErrConflict), so fn may run more
// than once. Event seqs come from the record's seq field, incremented in
// the script that appends, so they run 1, 2, 3... per trajectory.
//
// # Retention
//
// Live records have no TTL. The save that finishes a record (COMPLETED,
// FAILED, CANCELED) gives its hash and stream a TTL of Options.Retention;
// a stream created later inherits the record's remaining TTL. Redis
// expires the keys; List clears their index entries.
//
// # Round trips
//
// Get, Create, AppendEvents, Events and Ping take one round trip; Update
// two when no other writer intervenes (HMGET, then EVALSHA, with the
// expiry index entry pipelined with it on the finishing update); List one
// for the index prune and two per chunk of 256 index members it walks.
//
// # Redis Cluster
//
// Get, Update, AppendEvents and Events touch one tree's keys, hence one
// slot. Create's script also writes the created index, and the parent's
// record when the parent is in another tree (an operator naming a run of
// another tree as parent); these cross slots, so as written the store
// needs a single Redis (or a cluster-aware index, which this package does
// not provide).
package redis
