package streaming

import (
	"errors"
)

// Reshaping a held reply for the escrow.
//
// A reply whose tool call waits for approval is kept whole by the proxy.
// When the decision comes the reply goes out in the form the agent asked
// for last, which may not be the form it came in (an agent that gave up on
// a silent stream retries without streaming): AssembleJSON and RenderSSE
// turn one into the other. A refused call is answered by calling the model
// again with the refusal as the call's result (Continuation), and the two
// replies are joined into the one reply the agent reads (SpliceStream,
// SpliceJSON).
//
// These work on whole replies the proxy already holds in memory, bounded
// by its own limit, so unlike the filter they may copy and allocate; they
// still edit JSON member by member and never re-encode what they pass on.

// Joining a reply and its continuation into one.
//
// The agent already holds the start of the first reply: the filter (with
// Hold) let through everything before the stop and kept the calls. The
// spliced stream therefore begins with exactly what that filter gives for
// the first reply's events before its stop (it is computed by running
// one), so that a filter reading the spliced stream passes that prefix as
// it is and the proxy can send only what follows it. The continuation's
// content follows, renumbered after the first reply's, and its stop ends
// the whole.

// ErrIncompleteStream is returned when a stream has no stop or terminal
// event, so no whole reply can be built from it.
var ErrIncompleteStream = errors.New("streaming: stream has no stop event")

// RefuseCalls makes the filter refuse the client tool calls with these ids
// as allow=false refuses a name (replaced by the refusal text, stop reason
// fixed). Call before the first AppendEvent or Body.
func (f *CallFilter) RefuseCalls(ids ...string) { f.e.RefuseCalls(ids...) }
