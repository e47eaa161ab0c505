package replybody

import (
	"errors"
	"io"

	"gatekeeper/streaming"
)

// JSON is the reply body of a non-streamed turn or of an upstream error:
// forwarded as it comes, kept (up to limit) to decode at the end.
type JSON struct {
	r      Reply
	src    io.ReadCloser
	status int
	limit  int64
	buf    []byte
	over   bool
	err    error

	recorded bool
}

// NewJSON is the whole reply body of r's turn: src, which came with
// status, kept up to limit bytes.
func NewJSON(r Reply, src io.ReadCloser, status int, limit int64) *JSON {
	return &JSON{r: r, src: src, status: status, limit: limit}
}

func (b *JSON) Read(p []byte) (int, error) {
	n, err := b.src.Read(p)
	if n > 0 {
		b.r.Span.FirstByte()
	}
	if n > 0 && !b.over {
		if int64(len(b.buf)+n) > b.limit {
			b.over, b.buf = true, nil
		} else {
			b.buf = append(b.buf, p[:n]...)
		}
	}
	if err != nil {
		b.err = err
	}
	if err == io.EOF {
		b.record() // before the last bytes reach the agent (see Stream.Read)
	}
	return n, err
}

func (b *JSON) Close() error {
	err := b.src.Close()
	b.record()
	return err
}

// record settles the turn from the body seen so far; only the first call
// counts.
func (b *JSON) record() {
	if b.recorded {
		return
	}
	b.recorded = true
	var cause error
	if b.err != io.EOF {
		cause = b.err
		if cause == nil {
			cause = errors.New("reply body closed before its end")
		}
	}
	if b.status < 200 || b.status > 299 {
		b.r.Turn.SettleError(b.status, b.buf)
		return
	}
	res := &streaming.Result{}
	d := b.r.Dialect
	d.ReadExtras(b.r.Extras, b.buf)
	if !b.over && cause == nil {
		if r, derr := d.DecodeJSON(b.buf); derr == nil {
			res = r
		} else {
			cause = derr
		}
	}
	b.r.Turn.Settle(res, b.status, cause)
}
