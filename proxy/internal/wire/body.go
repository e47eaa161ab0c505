package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"gatekeeper/config"
	"gatekeeper/proxy/internal/apierr"
)

// ReadBody reads an agent's request body, at most limit bytes, under a
// read deadline: each timeout period must bring config.BodyProgressBytes
// of it (or the rest), so a body trickled a few bytes at a time is
// answered 408 instead of holding its connection. The deadline is lifted
// once the body is read: the reply may stream for minutes while the
// server watches the connection for the agent going away. The error is an
// *apierr.Error, the agent's answer (413, 408 or 400); the connection is then
// closed.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64, timeout time.Duration) ([]byte, error) {
	rc := http.NewResponseController(w)
	dr := &deadlineReader{src: http.MaxBytesReader(w, r.Body, limit), rc: rc, timeout: timeout}
	dr.extend()
	body, err := io.ReadAll(dr)
	_ = rc.SetReadDeadline(time.Time{})
	if err == nil {
		return body, nil
	}
	w.Header().Set("Connection", "close")
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, apierr.New(http.StatusRequestEntityTooLarge, apierr.InvalidRequest, fmt.Sprintf("request body is larger than gatekeeper's limit of %d bytes (limits.max_body_bytes)", limit))
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, apierr.New(http.StatusRequestTimeout, apierr.InvalidRequest, fmt.Sprintf("the request body arrived too slowly: less than %d bytes in %s (limits.body_timeout)", config.BodyProgressBytes, timeout))
	}
	return nil, apierr.BadRequest("could not read the request body")
}

// deadlineReader moves the connection's read deadline one timeout ahead
// each time progress bytes have arrived since it last did.
type deadlineReader struct {
	src     io.Reader
	rc      *http.ResponseController
	timeout time.Duration
	since   int // bytes since the deadline last moved
}

func (d *deadlineReader) Read(p []byte) (int, error) {
	n, err := d.src.Read(p)
	d.since += n
	if d.since >= config.BodyProgressBytes {
		d.extend()
	}
	return n, err
}

func (d *deadlineReader) extend() {
	d.since = 0
	// A writer that cannot set deadlines (a test recorder) reads without.
	_ = d.rc.SetReadDeadline(time.Now().Add(d.timeout))
}

// SetBody makes body the request's body, as it goes upstream.
func SetBody(r *http.Request, body []byte) {
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
}
