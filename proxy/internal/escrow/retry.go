package escrow

import (
	"context"
	"net/http"
	"strconv"
)

// A retry of a held turn re-attaches to its hold: no model call, no
// reservation. It waits for the decision like the original request did
// and receives the decided reply in its own form.

// WriteRetryJSON writes the decided reply of w's hold as one JSON body.
// An error is AwaitJSON's, and nothing was written.
func (e *Keeper) WriteRetryJSON(ctx context.Context, rw http.ResponseWriter, w *Wait) error {
	out, err := e.AwaitJSON(ctx, w)
	if err != nil {
		return err
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Content-Length", strconv.Itoa(len(out)))
	rw.WriteHeader(http.StatusOK)
	_, _ = rw.Write(out)
	return nil
}

// WriteRetryStream writes a stream of keepalives until the decision of
// w's hold, then the whole decided reply or an error event. Its only
// error is http.ErrAbortHandler: the stream had begun.
func (e *Keeper) WriteRetryStream(ctx context.Context, rw http.ResponseWriter, w *Wait) error {
	d := e.dialect(w.Client.API)
	rc := http.NewResponseController(rw)
	rw.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	rw.Header().Set("Cache-Control", "no-cache")
	rw.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	for {
		a := e.Await(ctx, w)
		var out []byte
		switch a.End {
		case Pending:
			out = d.NewKeepalive().Event()
		case Decided:
			out = a.Body
		default:
			ans, drop := a.Answer(FormStream)
			if drop {
				return http.ErrAbortHandler // the agent retries, or a killed run gets no answer
			}
			out = ErrorEvent(d, ans.Type, ans.Msg)
		}
		if _, err := rw.Write(out); err != nil {
			return nil // the agent went away
		}
		_ = rc.Flush()
		if a.End != Pending {
			return nil
		}
	}
}
