package proxy

import "sync"

// copyBufSize is the size of the buffers replies are read and copied with.
const copyBufSize = 32 << 10

// bufPool recycles reply buffers across turns: an open stream would
// otherwise keep its own read buffer and the reverse proxy allocate a copy
// buffer for every reply. It is the reverse proxy's BufferPool too.
type bufPool struct{ p sync.Pool }

func newBufPool() *bufPool {
	return &bufPool{p: sync.Pool{New: func() any { return new([copyBufSize]byte) }}}
}

func (bp *bufPool) Get() []byte { return bp.p.Get().(*[copyBufSize]byte)[:] }

// Put takes back a buffer that Get handed out; others are dropped.
func (bp *bufPool) Put(b []byte) {
	if cap(b) < copyBufSize {
		return
	}
	bp.p.Put((*[copyBufSize]byte)(b[:copyBufSize]))
}
