// Package ride owns the hand-off by which a caller's Redis commands ride
// in another operation's round trip: the caller puts a Rider in the
// context of a store call, and the store queues it, once, in the pipeline
// that carries its own script. The package names neither side, so that
// the store and what rides with it (the rate-limit buckets) stay apart.
package ride
