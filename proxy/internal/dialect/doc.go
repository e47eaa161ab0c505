// Package dialect owns the one table of the turn APIs gatekeeper serves:
// for each, the streaming dialect that reads and writes its bodies and
// errors, the provider family and route its turns arrive on, and the
// per-API facts the request checks and rewrites depend on.
//
// The table is the only place that lists the turn APIs: code that needs
// a fact about an API looks it up here (Of, Turn, Family) rather than
// switching on the API itself.
package dialect
