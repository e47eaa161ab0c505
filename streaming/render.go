package streaming

import (
	"fmt"

	"gatekeeper/streaming/sse"
)

// CheckRendered reads a stream a dialect rendered from a whole reply body
// (Dialect.RenderSSE) back with the dialect's decoder: a body whose blocks
// or items the decoder cannot read (a block without a type, a call without
// an id or name) is not a reply of the API, and rendering it would hand the
// agent events its SDK cannot read either.
func CheckRendered(d Dialect, stream []byte) ([]byte, error) {
	api := d.API()
	dec := d.NewDecoder()
	err := sse.Each(stream, func(ev *sse.Event) error {
		dec.Decode(ev)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: rendered stream: %v", ErrInvalidJSON, err)
	}
	if res := dec.Finish(); res.Unparsed > 0 || res.Truncated {
		if len(res.UnparsedErrors) > 0 {
			return nil, fmt.Errorf("%w: %s reply body: %v", ErrInvalidJSON, api, res.UnparsedErrors[0])
		}
		return nil, fmt.Errorf("%w: %s reply body renders no whole reply", ErrInvalidJSON, api)
	}
	return stream, nil
}
