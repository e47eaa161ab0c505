package replybody

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"gatekeeper/proxy/internal/coding"
)

// Filter reads the whole non-streamed reply resp, up to limit bytes, and
// puts in its place what check (the turn's call filter) makes of it, of
// known length, before any of it reaches the agent: a withheld call must
// never be delivered. It returns the reply as the provider sent it, for
// the turn to decode; with an error, the reply is not delivered (and the
// turn charges it, undelivered).
//
// cutOnly is a reply whose calls are only cut, none restricted: one too
// large to check, or that check cannot read, goes on as it came (its
// decoding, not its delivery, fails); raw is nil when it was not read
// whole. A compressed reply whose bytes do not decode (coding.ErrDecode)
// has no form to go on in: it is an error, cutOnly or not.
func Filter(resp *http.Response, limit int64, check func([]byte) ([]byte, error), cutOnly bool) (raw []byte, err error) {
	raw, err = io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if errors.Is(err, coding.ErrDecode) {
		cutOnly = false
	}
	if cutOnly && (err != nil || int64(len(raw)) > limit) {
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(raw), errReader{err}, resp.Body), resp.Body}
		return nil, nil
	}
	_ = resp.Body.Close()
	if err == nil && int64(len(raw)) > limit {
		err = fmt.Errorf("reply larger than limits.max_body_bytes (%d) cannot be checked for withheld calls", limit)
	}
	var out []byte
	if err == nil {
		if out, err = check(raw); err != nil {
			err = fmt.Errorf("checking the reply for withheld calls: %w", err)
		}
	}
	if err != nil && cutOnly {
		out, err = raw, nil // not JSON: delivered as it came, the decoder says why
	}
	if err != nil {
		return raw, err
	}
	resp.Body = io.NopCloser(&wholeReader{out})
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	return raw, nil
}

// wholeReader hands out b, with io.EOF along with its last bytes as an
// HTTP body of known length gives it: the turn is recorded before they
// reach the agent (see JSON.Read).
type wholeReader struct{ b []byte }

func (r *wholeReader) Read(p []byte) (int, error) {
	n := copy(p, r.b)
	r.b = r.b[n:]
	if len(r.b) == 0 {
		return n, io.EOF
	}
	return n, nil
}

// readCloser reads from r and closes c.
type readCloser struct {
	io.Reader
	c io.Closer
}

func (r readCloser) Close() error { return r.c.Close() }

// errReader fails every read with err, or ends when err is nil.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}
