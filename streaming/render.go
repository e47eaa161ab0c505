package streaming

import "errors"

// errNotYet marks a function whose body is not written yet.
var errNotYet = errors.New("streaming: not implemented")

// RenderSSE returns a stream that carries the same reply as the non-streamed
// body, in the provider's event grammar (what the SDKs accumulate back into
// an equal message).
func RenderSSE(api API, body []byte) ([]byte, error) { return nil, errNotYet }
