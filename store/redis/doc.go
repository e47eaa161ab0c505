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
//	                      array), ver (bumped by every save that changes
//	                      json or kids), gen (random, set at creation),
//	                      seq (the last event seq given out)
//	gk:{<root>}:ev:<id>   stream: one entry per event, entry id 0-<seq>,
//	                      fields e (the event's JSON, without seq, id and
//	                      data) and d (its data, verbatim; absent if none)
//	gk:{<slot>}:idx:created  sorted set, all scores 0, read in lexical
//	                      order: one member per record of the trees in
//	                      that slot, its inverted creation time in hex
//	                      then ":" and its id, so that the newest sorts
//	                      first and ties sort by id
//	gk:{<slot>}:idx:expires  sorted set: the members of finished records,
//	                      scored by when their keys expire (unix ms)
//	gk:{<slot>}:idx:calling  sorted set: the members of records that began
//	                      a call (CALLING_MODEL), scored by when (unix
//	                      µs); the lost-call sweep lists calls in flight
//	                      from it alone, and drops the entries of records
//	                      that moved on
//	gk:{idx}:slots        set: the slots whose indexes were ever written
//	gk:signals            pub/sub channel, not a key: one message per
//	                      trajectory.Signal, its JSON form
//
// <slot> is a short tag chosen to hash to the same Redis Cluster slot as
// the root (see slotTags): the indexes of a slot live beside its trees, so
// the script that creates or finishes a record writes its index entries in
// the same step, on a cluster as on one Redis. List walks the indexes of
// every slot in the directory as one (a k-way merge). A slot joins the
// directory before its first index entry is written, in a round trip of
// its own, once per slot and process; every later create sends the entry
// again in its own round trip, so that a directory that lost it (a
// failover to a replica that lagged) has it back at the slot's next
// create.
//
// Ids holding "{" or "}" are refused: a brace would move the hash tag.
//
// # Atomicity
//
// Each write is one Lua script, so it is atomic with respect to every
// replica. Update and UpdateChain are optimistic transactions over one
// script, Update being a chain of one record: they run fn on the records
// as this process last saw them and save with a script that checks each
// record's gen and ver first. If one moved, the script saves nothing and
// answers the current records; fn runs again on those, at once the first
// time and after a jittered backoff later, MaxUpdateAttempts times at most
// (ErrConflict). So fn may run more than once, and may run on a copy that
// turns out stale; only a run on current records is saved. The gen tells
// a record from an earlier one under the same id that expired, whose ver
// count started over. Event seqs come from the record's seq field,
// incremented in the script that appends, so they run 1, 2, 3... per
// trajectory.
//
// An id names its chain: the ancestors of "a/b/c" are "a/b" and "a". A
// record this process lacks is read with every ancestor its id names in
// one round trip. UpdateChain still follows each record's ParentID, which
// may skip a prefix ("a/b/c" may be a child of "a"), and reads again only
// for an ancestor that the cache has lost since.
//
// # Cache
//
// A Store remembers, for up to Options.CacheEntries records (least
// recently used dropped first), the gen, ver and JSON it last read or
// wrote. Create, Get, Update, UpdateChain and every conflict reply keep
// it current. It is a guess the script verifies: a stale entry costs a
// round trip, never a lost write. Within a process, updates of one tree
// queue on a lock instead of racing, so each finds the cache as the
// previous one left it.
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
// Get, Create, AppendEvents, Events and Ping take one round trip (Create
// one more the first time this process writes into a slot's index).
// Update and UpdateChain take one (EVALSHA, with the expiry index entries
// pipelined with it on a finishing update) when this process saw the last
// save of every record of the chain, and two otherwise: the script's
// conflict reply, or an HMGET pipeline for records not in the cache, then
// the script. List takes one to read the directory, one for the index
// prune (of up to 64 slots per call), one to read the head of every
// slot's index, one per 256 records it reads, and one more each time a
// slot's buffered index members run out. On a cluster, a pipeline is one
// round trip per node it touches, sent in parallel. UpdateChains sends
// the scripts of records in different trees in one pipeline, and an
// update whose context carries a rider (internal/ride: the proxy's key
// take) sends it in its own pipeline, at no extra round trip.
//
// # Signals
//
// Publish is one PUBLISH on gk:signals (SPUBLISH, sharded pub/sub, on a
// cluster, so that a signal goes to the nodes of the channel's slot and
// not over the whole cluster bus); Subscribe holds a connection
// subscribed to it (SSUBSCRIBE on a cluster), confirmed before Subscribe
// returns, and hands each message to a buffered channel without waiting:
// a subscriber that falls behind by more than the buffer loses signals,
// and a message that is not a signal is ignored. SignalStats counts both.
// go-redis pings an idle subscription and, when its connection breaks,
// dials again and resubscribes by itself; what was published in between
// is lost. Delivery is therefore at most once, as trajectory.Signals
// allows: the record still carries the pending control.
//
// # Redis Cluster
//
// Every script and every transaction touches one slot: a tree's keys and
// its slot's indexes. Open with Options.Cluster (or a
// *goredis.ClusterClient) runs the same layout on a Redis Cluster; only
// signals change, to sharded pub/sub. The directory keys and the
// approvals' lookups by id are single keys, written on their own.
//
// # Upgrading
//
// Earlier versions kept one pair of record indexes, gk:{idx}:created and
// gk:{idx}:expires, which only a single Redis could serve. Open moves
// their entries into the per-slot indexes and deletes them. Approvals
// made before keep being found by id (the lookup gk:{apr}:loc:<id>) and
// expired (the index gk:{apr}:due) until they end; they are not listed by
// an approvals List that names no trajectory or root.
//
// # Errors
//
// Redis replies that say "not now" are ErrUnavailable, as a refused
// connection or a timeout is: LOADING, READONLY, MASTERDOWN, BUSY,
// TRYAGAIN, CLUSTERDOWN, MOVED and ASK left after go-redis's redirects,
// NOREPLICAS, OOM, and a server at its client limit. A caller retries
// them and fails closed meanwhile. Any other error reply can never
// succeed, and is passed on as a permanent error.
package redis
