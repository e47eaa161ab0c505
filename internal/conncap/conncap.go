// Package conncap bounds what clients that have not authenticated can hold
// of the server: a Listener keeps at most a set number of connections on
// which no request has yet authenticated (pending), closing the oldest
// pending one when a new connection would pass the cap, and Bound puts a
// deadline on every request body, so that a client sending a request
// slowly, or never finishing it, is closed rather than kept. A connection
// leaves the pending set when a handler calls Trust for one of its
// requests (a valid admin token, virtual key or signed delivery).
package conncap

import (
	"container/list"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Listener is a net.Listener whose connections that have not
// authenticated are capped.
type Listener struct {
	net.Listener
	max int
	log *slog.Logger

	mu      sync.Mutex
	pending list.List // of *Conn, oldest first

	evicted atomic.Int64
}

// NewListener caps the pending connections of ln at n (at least 1).
func NewListener(ln net.Listener, n int, log *slog.Logger) *Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Listener{Listener: ln, max: max(n, 1), log: log}
}

// Accept accepts the next connection as pending. When that makes more
// pending connections than the cap, the oldest pending one not answering
// a request it has received whole is closed: a
// client that has not authenticated gives way to a newer one, so that
// slow or idle clients cannot keep the server from taking new
// connections (a probe, an agent) however many they open.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &Conn{Conn: c, l: l}
	var oldest *Conn
	l.mu.Lock()
	cc.elem = l.pending.PushBack(cc)
	if l.pending.Len() > l.max {
		// A connection whose request has all arrived and is being
		// answered (a probe of /healthz) finishes first: it holds its
		// descriptor for as long as a handler takes, not as long as a
		// client likes.
		// The cap may be passed by those alone, never by idle ones.
		for e := l.pending.Front(); e != cc.elem; e = e.Next() {
			if c := e.Value.(*Conn); c.busy == 0 {
				oldest = c
				l.pending.Remove(e)
				c.elem = nil
				break
			}
		}
	}
	l.mu.Unlock()
	if oldest != nil {
		n := l.evicted.Add(1)
		// One line per power of two: a flood is told, not logged per
		// connection.
		if n&(n-1) == 0 {
			l.log.Warn("connection without authentication closed to make room for a new one",
				slog.Int("max_pending_connections", l.max), slog.Int64("closed_so_far", n),
				slog.String("remote", oldest.RemoteAddr().String()))
		}
		_ = oldest.Conn.Close()
	}
	return cc, nil
}

// Pending returns how many connections have not authenticated.
func (l *Listener) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending.Len()
}

// Evicted returns how many pending connections were closed for newer ones.
func (l *Listener) Evicted() int64 { return l.evicted.Load() }

// Conn is one accepted connection.
type Conn struct {
	net.Conn
	l    *Listener
	elem *list.Element // nil once trusted or closed
	busy int           // requests received whole being answered; guarded by l.mu
}

// serving counts a request of c received whole, and being answered, until
// its done.
func (c *Conn) serving(d int) {
	c.l.mu.Lock()
	c.busy += d
	c.l.mu.Unlock()
}

func connOf(ctx context.Context) *Conn {
	cc, _ := ctx.Value(connKey{}).(*Conn)
	return cc
}

func (c *Conn) trust() {
	c.l.mu.Lock()
	if c.elem != nil {
		c.l.pending.Remove(c.elem)
		c.elem = nil
	}
	c.l.mu.Unlock()
}

// Close closes the connection and takes it out of the pending set.
func (c *Conn) Close() error {
	c.trust()
	return c.Conn.Close()
}

type connKey struct{}

// ConnContext is an http.Server's ConnContext: it makes the connection
// reachable from its requests' contexts, for Trust.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*Conn); ok {
		return context.WithValue(ctx, connKey{}, cc)
	}
	return ctx
}

// Trust marks the connection of the request ctx belongs to as
// authenticated: it is no longer counted as pending nor closed for a newer
// one. Without a capped connection in ctx it does nothing.
func Trust(ctx context.Context) {
	if cc := connOf(ctx); cc != nil {
		cc.trust()
	}
}

// Bound puts a read deadline on every request body: each timeout must
// bring at least progress bytes of it (or its end). A body that comes
// slower fails its reads, and the server closes the connection instead of
// waiting for the rest, which it would otherwise do however slowly it
// came, even after the handler answered without reading it (a refusal
// before authentication). The deadline is lifted once the body has been
// read to its end, so a long answer (an event stream) is not cut. A
// request without a body is left alone. While a request received whole
// is answered, its connection is not closed for a newer one (Listener).
func Bound(timeout time.Duration, progress int) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			cc := connOf(r.Context())
			if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
				if cc != nil {
					cc.serving(1)
					defer cc.serving(-1)
				}
				next.ServeHTTP(w, r)
				return
			}
			b := &body{src: r.Body, rc: http.NewResponseController(w), timeout: timeout, progress: progress, conn: cc}
			b.extend()
			r.Body = b
			defer b.answered()
			next.ServeHTTP(w, r)
		})
	}
}

// body moves the connection's read deadline one timeout ahead each time
// progress bytes have arrived, and lifts it at the body's end.
type body struct {
	src      io.ReadCloser
	rc       *http.ResponseController
	timeout  time.Duration
	progress int
	since    int
	conn     *Conn // nil without a capped connection

	// The body may be read on another goroutine than the handler's (a
	// request streamed upstream): mu orders its end with the answer's.
	mu       sync.Mutex
	ended    bool // read to its end
	finished bool // the handler returned
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.src.Read(p)
	b.since += n
	switch {
	case errors.Is(err, io.EOF):
		b.mu.Lock()
		if !b.ended && !b.finished {
			b.ended = true
			_ = b.rc.SetReadDeadline(time.Time{})
			if b.conn != nil {
				b.conn.serving(1)
			}
		}
		b.mu.Unlock()
	case err == nil && b.since >= b.progress:
		b.extend()
	}
	return n, err
}

// answered is called when the handler has returned.
func (b *body) answered() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.finished = true
	if b.ended && b.conn != nil {
		b.conn.serving(-1)
	}
}

func (b *body) Close() error { return b.src.Close() }

func (b *body) extend() {
	b.since = 0
	// A writer that cannot set deadlines (a test recorder) reads without.
	_ = b.rc.SetReadDeadline(time.Now().Add(b.timeout))
}

// Bounds of the default cap.
const (
	minDefault = 16
	maxDefault = 4096
	// withoutLimit is the default when the open-file limit cannot be read.
	withoutLimit = 1024
)

// DefaultMax is the cap on pending connections when
// limits.max_pending_connections is not set: a quarter of the process's
// open-file limit, between 16 and 4096, so that clients that have not
// authenticated can use at most a quarter of the file descriptors and
// the rest stays for agents, upstream calls, the store and the logs.
func DefaultMax() int {
	n := openFiles()
	if n == 0 {
		return withoutLimit
	}
	return int(min(max(n/4, minDefault), maxDefault))
}
