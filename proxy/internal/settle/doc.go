// Package settle owns the writes of a turn's settle that leave its
// request's path: the retries of a settle the store could not take
// (Retrier: owned, bounded, idempotent by call id, drained on Close), and
// the write-behind queue (Behind) that holds settles for
// store.settle_window so that a thread's next admission carries them in
// its own update, and flushes what no admission took, many records in one
// step. What a settle writes is the caller's: the queue sees it through
// Pending.
package settle
