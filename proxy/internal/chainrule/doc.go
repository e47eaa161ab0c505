// Package chainrule owns the rules a turn applies to its chain of
// records (the thread record first, then each ancestor up to the run)
// inside the store's atomic update: the budget levels the meter reads,
// the stage each record is at, what an exhausted budget does (fail or
// pause), the charge of a call taken for lost and the record's memory of
// it and its estimate (ChargeLost, KeepSwept), the release of an
// abandoned admission's reservation (Reclaim), an operator's pending control taking effect at
// a turn boundary, the count of replies cut at their output limit, and the loop watchdog's escalation; and the
// reading of the stage events they write. Each is a plain function over
// trajectory records; none does I/O.
package chainrule
