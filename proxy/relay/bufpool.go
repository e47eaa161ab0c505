package relay

import (
	"net/http/httputil"
	"sync"
)

// bufSize is the size of the buffers replies are read and copied with.
const bufSize = 32 << 10

// BufferPool recycles reply buffers across turns: an open stream would
// otherwise keep its own read buffer and the reverse proxy allocate a copy
// buffer for every reply. It is the reverse proxy's BufferPool too.
type BufferPool struct{ p sync.Pool }

var _ httputil.BufferPool = (*BufferPool)(nil)

// NewBufferPool is an empty pool of reply buffers.
func NewBufferPool() *BufferPool {
	return &BufferPool{p: sync.Pool{New: func() any { return new([bufSize]byte) }}}
}

// Get hands out a buffer to read or copy a reply with.
func (bp *BufferPool) Get() []byte { return bp.p.Get().(*[bufSize]byte)[:] }

// Put takes back a buffer that Get handed out; others are dropped.
func (bp *BufferPool) Put(b []byte) {
	if cap(b) < bufSize {
		return
	}
	bp.p.Put((*[bufSize]byte)(b[:bufSize]))
}
