// Package settle owns the writes of a turn's settle that leave its
// request's path: the retries of a settle the store could not take
// (Retrier: owned, bounded, idempotent by call id, drained on Close), and
// the write-behind queue (Behind) that holds settles for
// store.settle_window so that a thread's next admission carries them in
// its own update, and flushes what no admission took, many records in one
// step. What a settle writes is the caller's: the queue sees it through
// Pending. Turn is a turn's settle as a Pending: its write in its own
// update or in an admission's, its key and tenant sides, and what is done
// with a write the store did not take (retried, or logged with the
// figures); its rules on the chain and its sides are the turn's.
package settle
