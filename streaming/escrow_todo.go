package streaming

import "errors"

// errNotYet marks a function whose body is not written yet.
var errNotYet = errors.New("streaming: not implemented")

// RenderSSE returns a stream that carries the same reply as the non-streamed
// body, in the provider's event grammar (what the SDKs accumulate back into
// an equal message).
func RenderSSE(api API, body []byte) ([]byte, error) { return nil, errNotYet }

// SpliceStream returns one stream that reads as a single reply: first
// without its client tool calls and without its stop and terminal events,
// then cont's content (its start events dropped; indices, output_index and
// sequence_number renumbered to follow first's), cont's stop and terminal
// events, with usage summed over both calls. ids and model stay first's.
func SpliceStream(api API, first, cont []byte) ([]byte, error) { return nil, errNotYet }

// SpliceJSON does what SpliceStream does for non-streamed bodies.
func SpliceJSON(api API, first, cont []byte) ([]byte, error) { return nil, errNotYet }
