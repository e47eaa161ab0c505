// Package replybody owns the bodies of a turn's reply as the agent reads
// them. Stream reads a streamed reply event by event: it hands the relay
// whole events only, lets the dialect's decoder see every one, passes each
// through the turn's call filter, keeps the agent alive while the filter
// holds events back behind a call, aborts a stream that ended without its
// terminal event, and, for a tenant with gates, keeps the reply in escrow
// once a gated call shows at its stop, opens the hold and waits for the
// decision. JSON forwards a whole reply (or an error reply) as it comes,
// kept up to a limit to decode at its end.
//
// Both record the turn exactly once, before the agent gets the reply's
// last bytes, through Turn: the outcome, its recording, why the call was
// stopped and the opening of a hold stay the turn's.
//
// Filter reads a whole reply before any of it is delivered, to put in its
// place what the turn's call filter makes of it: a call withheld or cut
// never reaches the agent.
package replybody
