// Package keys owns a provider's pool of keys and a turn's side of their
// scheduling: the pool (keys by id "provider/keyname", their secrets, how
// a key is put in a request, and the round robin for requests no grant
// placed), the scheduler's construction, and one call's use of the keys
// (Turn): its estimate, the take that rides in its admission's round
// trip, the grant it waits for, the transport that moves a call the
// provider refused to another key of the pool, and the grant's settle
// with what the call used. A refusal for want of capacity is a *Refusal,
// which the caller puts in the agent's error form.
package keys
