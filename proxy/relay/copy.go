package relay

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
)

// Errors of a copy, by the side that failed: the caller answers neither
// (the status went out already) but records them apart, since a client
// that hung up and a provider that broke off are different outcomes.
var (
	// ErrRead: the reply's source failed before its end.
	ErrRead = errors.New("relay: reading the reply failed")
	// ErrWrite: the agent's connection took no more bytes.
	ErrWrite = errors.New("relay: writing to the client failed")
)

// Copy hands resp to the agent on w: resp's headers less the hop-by-hop
// ones, its status, then its body, each read written and flushed at once
// (a reply's source yields whole events, which must not wait in a
// buffer), then its trailers. resp.Body is read until io.EOF and not
// closed: its owner closes it, and records what it saw there. buf is the
// copy's buffer.
//
// An error wraps ErrRead or ErrWrite; the response has begun by then, and
// the only way left to tell the agent is to abort the connection.
func Copy(w http.ResponseWriter, resp *http.Response, buf []byte) error {
	h := w.Header()
	RemoveHopHeaders(resp.Header)
	for k, vv := range resp.Header {
		// A name the agent's reply does not have yet takes the
		// provider's values as they are, clipped so that a value added
		// to either side later is appended to a copy: one slice less per
		// header, and a reply carries a dozen.
		if _, ok := h[k]; !ok {
			h[k] = slices.Clip(vv)
			continue
		}
		h[k] = append(h[k], vv...)
	}
	announced := len(resp.Trailer)
	if announced > 0 {
		names := make([]string, 0, announced)
		for k := range resp.Trailer {
			names = append(names, k)
		}
		for _, k := range names {
			h.Add("Trailer", k)
		}
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	if announced > 0 {
		// Trailers need a chunked reply: flush to commit to one.
		_ = rc.Flush()
	}
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return fmt.Errorf("%w: %w", ErrWrite, err)
			}
			if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
				return fmt.Errorf("%w: %w", ErrWrite, err)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("%w: %w", ErrRead, rerr)
		}
	}
	// The trailers are known once the body was read to its end.
	for k, vv := range resp.Trailer {
		if len(vv) > 0 {
			h[http.TrailerPrefix+k] = vv
		}
	}
	return nil
}
