// Package watchdog owns the loop watchdog's checks of one thread's turn
// (docs/guide/watchdog.md): at admission, the results a request brings
// are read into the thread record's Watch and the thread's step applied
// to the request (a notice, the read-only restriction, or a pause or the
// run's end in place of the call); at the settle, the calls a reply
// proposed and whether it said anything. Each runs inside the store
// update the turn makes anyway; the escalation itself is chainrule's.
package watchdog
