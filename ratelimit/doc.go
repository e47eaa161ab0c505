// Package ratelimit decides which turn goes to which provider key and when,
// below the providers' own limits, so that gatekeeper waits instead of
// finding the limits through 429s.
//
// It holds these things:
//
//   - Buckets: the capacity of each provider key in requests, input tokens
//     and output tokens, as GCRA buckets holding a burst (one second of
//     the rate by default, the providers' own quantum) and refilling
//     continuously at the per-minute rate. Memory keeps them in this
//     process; Redis keeps them in Redis with atomic Lua scripts on the
//     server's clock, so that every replica draws on one budget per key.
//   - ParseHeaders: what the providers' rate-limit headers say is left and
//     when their buckets are full again, which only ever lowers the
//     buckets' view.
//   - Scheduler: admits turns on the key of a pool with the most headroom
//     (a key without limits measured against its pool's limited keys) and,
//     when none has room, queues them per class (interactive, standard,
//     batch) and serves the queues by deficit round-robin charged in
//     estimated tokens, so that a flood of large batch turns cannot starve
//     small interactive ones. The turns a pool serves next are taken for
//     together (BatchTaker: one round trip to Redis for up to 64), so
//     that a key every turn waits for is served at its rate.
//   - Ride: a Take prepared to go in another operation's pipeline to the
//     same Redis (the proxy sends it with the admission's update), so
//     that taking a key costs a turn no round trip of its own; given
//     back (Undo) when what it rode with refused the turn. SettleRide is
//     the same for a flush's key settles (SettleAll when nothing carries
//     them).
//   - Slices (Options.Slices, on Redis): a replica takes capacity of a
//     roomy key ahead of its turns, in the script of a take that goes to
//     Redis anyway, and spends it in memory; never when the key has less
//     than half a burst free, so near its limit every take is the
//     bucket's own (slices.go).
//
// A bucket's take is exact at any rate: the Redis scripts count from the
// whole microsecond of the server's clock and store a theoretical arrival
// time's fraction of a microsecond, Memory its fraction of a nanosecond.
//
// The package takes plain values (limits, keys, costs): it knows nothing of
// the proxy or its configuration.
package ratelimit
