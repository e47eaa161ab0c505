package relay

import (
	"errors"
	"io"
	"time"
)

// ErrQuiet is Upstream.Read's answer when the provider sent nothing
// within the wait: the read goes on aside, and the caller may hand the
// agent a keepalive meanwhile.
var ErrQuiet = errors.New("relay: provider quiet")

// Upstream is a provider's reply body as a relay reads it: plainly, or,
// while the agent must hear from gatekeeper before the provider speaks
// again (a reply held behind a tool call), with a wait, the read running
// aside on its own goroutine. Upstream owns that goroutine: Close ends it
// and waits for it.
type Upstream struct {
	src     io.ReadCloser
	buf     []byte
	reading chan upstreamRead // the read aside; nil when none runs
	closed  bool
}

// upstreamRead is what one read of the provider's body gave.
type upstreamRead struct {
	n   int
	err error
}

// NewUpstream reads src into buf, which it uses until Close returns.
func NewUpstream(src io.ReadCloser, buf []byte) *Upstream {
	return &Upstream{src: src, buf: buf}
}

// Read returns the provider's next bytes, valid until the next Read.
// With wait < 0 it waits as long as the provider takes. With wait >= 0
// it waits at most that long and then returns ErrQuiet, the read going on
// aside for the next Read to take.
func (u *Upstream) Read(wait time.Duration) ([]byte, error) {
	if u.reading == nil && wait < 0 {
		n, err := u.src.Read(u.buf)
		return u.buf[:n], err
	}
	if u.reading == nil {
		ch := make(chan upstreamRead, 1)
		u.reading = ch
		go func() {
			n, err := u.src.Read(u.buf)
			ch <- upstreamRead{n, err}
		}()
	}
	var quiet <-chan time.Time
	if wait >= 0 {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		quiet = timer.C
	}
	select {
	case r := <-u.reading:
		u.reading = nil
		return u.buf[:r.n], r.err
	case <-quiet:
		return nil, ErrQuiet
	}
}

// Close closes the body, which ends a read aside, and waits for that
// read: the buffer is the caller's again when Close returns.
func (u *Upstream) Close() error {
	if u.closed {
		return nil
	}
	u.closed = true
	err := u.src.Close()
	if u.reading != nil {
		<-u.reading
		u.reading = nil
	}
	return err
}
